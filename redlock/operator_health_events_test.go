package redlock

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// healthRecorder is an Observer and HealthObserver that keeps what it is told.
type healthRecorder struct {
	mu     sync.Mutex
	events []string
}

func (r *healthRecorder) NodeCall(string, string, time.Duration, error) {}
func (r *healthRecorder) Renewal(error)                                 {}

func (r *healthRecorder) add(s string) {
	r.mu.Lock()
	r.events = append(r.events, s)
	r.mu.Unlock()
}
func (r *healthRecorder) NodeDown(node, problem string) {
	if problem == "" {
		r.add("down without a problem " + node)
		return
	}
	r.add("down " + node)
}
func (r *healthRecorder) NodeUp(node string) { r.add("up " + node) }
func (r *healthRecorder) NodeQuarantined(node string, until time.Time, cause QuarantineCause) {
	if until.Before(time.Now()) {
		r.add("quarantined in the past " + node)
		return
	}
	r.add(fmt.Sprintf("quarantined %s %s", cause, node))
}
func (r *healthRecorder) snapshot() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// A paused node is reported down once (not at every failed check), up once when it
// answers again, and a restarted one quarantined once with cause restart.
func TestHealthObserverTransitions(t *testing.T) {
	servers := redistest.StartN(t, 3)
	rec := &healthRecorder{}
	opt := fastOptions()
	opt.Observer = rec
	c := newTestClient(t, servers, opt)
	waitRunIDs(t, c)
	addr := c.Status().Nodes[0].Address
	if got := rec.snapshot(); len(got) != 0 {
		t.Fatalf("events before any transition: %v", got)
	}
	if err := servers[0].Pause(); err != nil {
		t.Fatal(err)
	}
	if !eventually(3*time.Second, func() bool { return slices.Contains(rec.snapshot(), "down "+addr) }) {
		t.Fatal("timed out waiting for: node reported down")
	}
	waitChecks(t, c, 3) // more failed checks: still one event
	if err := servers[0].Resume(); err != nil {
		t.Fatal(err)
	}
	if !eventually(3*time.Second, func() bool { return slices.Contains(rec.snapshot(), "up "+addr) }) {
		t.Fatal("timed out waiting for: node reported up")
	}
	if got, want := rec.snapshot(), []string{"down " + addr, "up " + addr}; !slices.Equal(got, want) {
		t.Fatalf("events = %v, want %v", got, want)
	}
	if err := servers[1].Restart(); err != nil {
		t.Fatal(err)
	}
	addr1 := c.Status().Nodes[1].Address
	if !eventually(3*time.Second, func() bool {
		return slices.Contains(rec.snapshot(), "quarantined restart "+addr1)
	}) {
		t.Fatal("timed out waiting for: node reported quarantined")
	}
	waitChecks(t, c, 3) // more checks: still one event
	n := 0
	for _, e := range rec.snapshot() {
		if e == "quarantined restart "+addr1 {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("quarantine reported %d times: %v", n, rec.snapshot())
	}
}
