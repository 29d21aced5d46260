package caddyredlock

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// TestHoldMetric: caddy_redlock_hold_duration_seconds counts holds by how they ended:
// released (a lone request), handed_over (to a waiter of this instance), lost (force
// release while it ran), drained (client gone mid-stream), with sums matching how long
// the locks were held.
func TestHoldMetric(t *testing.T) {
	skipShort(t)
	servers := redistest.StartN(t, 3)
	st := &streamer{cancelled: map[string]time.Time{}}
	up := newUpstream(t, 0, st.serve)
	// Named: the histogram is process-wide, and the drains of an earlier test's requests
	// may end during this one; only this block's series are counted.
	s := adminSite(t, servers, redistest.URLs(servers), "hold:", "name holdmetric", up)
	adm := newAdmClient(s)
	c := &http.Client{Timeout: 30 * time.Second}
	const count, sum = "caddy_redlock_hold_duration_seconds_count", "caddy_redlock_hold_duration_seconds_sum"
	before := scrape(t, adm)
	delta := func(after, name, how string) float64 {
		mine := []string{`how="` + how + `"`, `name="holdmetric"`}
		return max(metricValue(after, name, mine...), 0) - max(metricValue(before, name, mine...), 0)
	}

	// Three requests for one key at once: they queue here and hand over to each other;
	// the last one releases.
	done := make(chan int, 3)
	for i := range 3 {
		go func() {
			code, _, _ := get(t, c, "GET", fmt.Sprintf("%s/same?d=300ms&i=%d", s.url, i), nil)
			done <- code
		}()
	}
	for range 3 {
		if code := <-done; code != 200 {
			t.Errorf("request: %d", code)
		}
	}
	holder := startStream(t, s.url+"/lost?d=20s")
	if !eventually(10*time.Second, func() bool { return adm.locks(t).Held == 1 }) {
		t.Fatal("the stream never held its lock")
	}
	time.Sleep(200 * time.Millisecond) // held this long: the lost lock's hold time is checked below
	if code, body, _ := adm.do(t, "DELETE", "/redlock/keys?key=/lost"); code != 200 {
		t.Fatalf("force release: %d %s", code, body)
	}
	holder.wait(t, 10*time.Second)

	// A client that goes away mid-stream: its lock drains one ttl (1500ms), then ends.
	gone := startStream(t, s.url+"/gone?d=20s")
	if !eventually(10*time.Second, func() bool {
		for _, l := range adm.locks(t).Locks {
			if l.Key == "/gone" && l.State == stateHeld {
				return true
			}
		}
		return false
	}) {
		t.Fatal("the stream to cut never held its lock")
	}
	gone.cancel()
	gone.wait(t, 10*time.Second)

	var after string
	if !eventually(10*time.Second, func() bool {
		after = scrape(t, adm)
		return delta(after, count, holdReleased)+delta(after, count, holdHandedOver) == 3 && delta(after, count, holdLost) == 1 &&
			delta(after, count, holdDrained) == 1
	}) {
		t.Fatalf("hold counts: released %v, handed_over %v, lost %v, drained %v; want 3 released or handed over, 1 lost, 1 drained",
			delta(after, count, holdReleased), delta(after, count, holdHandedOver), delta(after, count, holdLost), delta(after, count, holdDrained))
	}
	if s := delta(after, sum, holdDrained); s < 1.5 {
		t.Errorf("hold time of the drained lock: %vs, want at least the 1.5s ttl it drained", s)
	}
	if delta(after, count, holdHandedOver) < 1 {
		t.Errorf("no hand-over counted for 3 queued requests")
	}
	if s := delta(after, sum, holdReleased) + delta(after, sum, holdHandedOver); s < 0.9 || s > 10 {
		t.Errorf("hold time of 3 x 300ms requests: %vs", s)
	}
	if s := delta(after, sum, holdLost); s < 0.15 {
		t.Errorf("hold time of the lost lock (held ~200ms): %vs", s)
	}
	if !regexp.MustCompile(`caddy_redlock_hold_duration_seconds_bucket\{how="released",mode="exclusive",name="[^"]+",le="0.001"\}`).MatchString(after) ||
		holdBuckets[len(holdBuckets)-1] < 3600 {
		t.Errorf("buckets do not run from 1ms to hours:\n%s", grepLines(after, "hold_duration_seconds_bucket"))
	}
}

// grepLines returns the lines of s containing sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
