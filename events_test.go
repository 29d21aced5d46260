package caddyredlock

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyevents"
	"github.com/redis/go-redis/v9"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

func init() { caddy.RegisterModule(eventRecorder{}) }

var _ caddyevents.Handler = eventRecorder{}

// eventRecorder is a test-only events handler (events.handlers.redlock_test_recorder):
// it keeps every event it is given in recordedEvents.
type eventRecorder struct{}

func (eventRecorder) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "events.handlers.redlock_test_recorder", New: func() caddy.Module { return new(eventRecorder) }}
}

type recordedEvent struct {
	name, origin string
	data         map[string]any
}

var recordedEvents struct {
	mu  sync.Mutex
	all []recordedEvent
}

func (eventRecorder) Handle(_ context.Context, e caddy.Event) error {
	origin := ""
	if e.Origin() != nil {
		origin = string(e.Origin().CaddyModule().ID)
	}
	recordedEvents.mu.Lock()
	recordedEvents.all = append(recordedEvents.all, recordedEvent{name: e.Name(), origin: origin, data: e.Data})
	recordedEvents.mu.Unlock()
	return nil
}

// eventsSeen returns the recorded events named name whose data has every field of want.
func eventsSeen(name string, want map[string]any) []recordedEvent {
	recordedEvents.mu.Lock()
	defer recordedEvents.mu.Unlock()
	var out []recordedEvent
	for _, e := range recordedEvents.all {
		if e.name != name {
			continue
		}
		ok := true
		for k, v := range want {
			ok = ok && fmt.Sprint(e.data[k]) == fmt.Sprint(v)
		}
		if ok {
			out = append(out, e)
		}
	}
	return out
}

// subscribeRecorder adds an events app to a config that hands redlock's events to the
// recorder.
func subscribeRecorder(cfg map[string]any) {
	apps := cfg["apps"].(map[string]any)
	apps["events"] = map[string]any{"subscriptions": []any{map[string]any{
		"events":   []any{eventLockLost, eventNodeDown, eventNodeUp, eventNodeQuarantined},
		"handlers": []any{map[string]any{"handler": "redlock_test_recorder"}},
	}}}
}

// TestEvents: a real Caddy with an events subscription sees lock_lost when a held lock
// is force-released under its request, node_down and node_up when a node is paused and
// resumed (once each, however many health checks fail meanwhile), and node_quarantined
// when a node restarts without its data; each with its data, the block's name and the
// handler as origin. The name is also in the metrics and /redlock/locks.
func TestEvents(t *testing.T) {
	skipShort(t)
	recordedEvents.mu.Lock()
	recordedEvents.all = nil // only this run's events (go test -count=N)
	recordedEvents.mu.Unlock()
	servers := redistest.StartN(t, 3)
	st := &streamer{cancelled: map[string]time.Time{}}
	up := newUpstream(t, 0, st.serve)
	s := startCaddyPatched(t, "", fmt.Sprintf(`
	redlock {
		%s
		prefix ev:
		ttl 1500ms
		node_timeout 100ms
		name orders
	}
%s`, redisLine(servers), proxyStreaming(up)), subscribeRecorder)
	adm := newAdmClient(s)

	// lock_lost, through a force release of the held key.
	lost := startStream(t, s.url+"/lost?d=20s")
	if !eventually(10*time.Second, func() bool {
		l := adm.locks(t)
		return len(l.Locks) == 1 && l.Locks[0].State == stateHeld
	}) {
		t.Fatal("the stream never held its lock")
	}
	if l := adm.locks(t).Locks[0]; l.Name != "orders" {
		t.Errorf("/redlock/locks name = %q, want orders", l.Name)
	}
	if m := scrape(t, adm); metricValue(m, "caddy_redlock_held_locks", `name="orders"`) != 1 ||
		metricValue(m, "caddy_redlock_acquire_duration_seconds_count", `name="orders"`) < 1 {
		t.Errorf("metrics by name=orders: held %v, acquired %v", metricValue(m, "caddy_redlock_held_locks", `name="orders"`),
			metricValue(m, "caddy_redlock_acquire_duration_seconds_count", `name="orders"`))
	}
	time.Sleep(100 * time.Millisecond) // held this long: lock_lost's held_ms is checked below
	if code, body, _ := adm.do(t, "DELETE", "/redlock/keys?key=/lost"); code != 200 {
		t.Fatalf("force release: %d %s", code, body)
	}
	lost.wait(t, 10*time.Second)
	want := map[string]any{"key": "/lost", "mode": "exclusive", "reason": "force_released", "name": "orders"}
	if !eventually(5*time.Second, func() bool { return len(eventsSeen(eventLockLost, want)) == 1 }) {
		t.Fatalf("no lock_lost event with %v: %s", want, allEvents())
	}
	e := eventsSeen(eventLockLost, want)[0]
	if ms, ok := e.data["held_ms"].(int64); !ok || ms < 100 {
		t.Errorf("lock_lost held_ms = %#v, want >= 100", e.data["held_ms"])
	}
	if e.origin != "http.handlers.redlock" {
		t.Errorf("origin = %q", e.origin)
	}

	// node_down, then node_up, once each.
	paused := servers[2].Addr()
	if err := servers[2].Pause(); err != nil {
		t.Fatal(err)
	}
	if !eventually(10*time.Second, func() bool { return len(eventsSeen(eventNodeDown, map[string]any{"node": paused})) > 0 }) {
		t.Fatal("no node_down event")
	}
	// Two more failed health checks (counted as node errors of op health) before the
	// node answers again: they must not make a second node_down.
	failedChecks := map[string]string{"node": paused, "op": "health"}
	before := metricTotal(t, metrics.nodeErrors, failedChecks)
	if !eventually(10*time.Second, func() bool { return metricTotal(t, metrics.nodeErrors, failedChecks) >= before+2 }) {
		t.Fatalf("no two more failed health checks of the paused node (%v counted)", metricTotal(t, metrics.nodeErrors, failedChecks)-before)
	}
	if err := servers[2].Resume(); err != nil {
		t.Fatal(err)
	}
	if !eventually(10*time.Second, func() bool {
		return len(eventsSeen(eventNodeUp, map[string]any{"node": paused, "name": "orders"})) > 0
	}) {
		t.Fatal("no node_up event")
	}
	down := eventsSeen(eventNodeDown, map[string]any{"node": paused, "name": "orders"})
	if len(down) != 1 || down[0].data["error"] == "" {
		t.Errorf("node_down events: %+v, want one with an error", down)
	}

	// node_quarantined, for a node restarted without data.
	restarted := servers[1].Addr()
	if err := servers[1].Restart(); err != nil {
		t.Fatal(err)
	}
	if !eventually(10*time.Second, func() bool {
		return len(eventsSeen(eventNodeQuarantined, map[string]any{"node": restarted, "cause": "restart", "name": "orders"})) > 0
	}) {
		t.Fatal("no node_quarantined event")
	}
	q := eventsSeen(eventNodeQuarantined, map[string]any{"node": restarted})
	if until, ok := q[0].data["until"].(time.Time); len(q) != 1 || !ok || !until.After(time.Now()) {
		t.Errorf("node_quarantined events: %+v, want one with a future until", q)
	}
	// node_quarantined, for a node that lost its data without a restart (FLUSHALL).
	flushed := servers[2].Addr()
	rc := redis.NewClient(&redis.Options{Addr: flushed})
	defer rc.Close()
	if err := rc.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	if !eventually(10*time.Second, func() bool {
		return len(eventsSeen(eventNodeQuarantined, map[string]any{"node": flushed, "cause": "data_loss", "name": "orders"})) == 1
	}) {
		t.Fatalf("no node_quarantined event with cause data_loss: %s", allEvents())
	}
	// Nothing for the nodes that did not move.
	if n := eventsSeen(eventNodeDown, map[string]any{"node": servers[0].Addr()}); len(n) != 0 {
		t.Errorf("node_down for a node that never stopped: %+v", n)
	}
}

// allEvents is every recorded event, for failure messages.
func allEvents() string {
	recordedEvents.mu.Lock()
	defer recordedEvents.mu.Unlock()
	return fmt.Sprintf("%+v", recordedEvents.all)
}
