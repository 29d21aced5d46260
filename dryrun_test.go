package caddyredlock

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// TestDryRun: with dry_run, a request whose key is held (here by a streamed request of
// this instance, and by another Redlock client) goes through at once, unlocked, where it
// would have waited; it is counted in caddy_redlock_dry_run_total{reason="busy"} and
// logged with its key. A free key is still locked. With no quorum at all, requests go
// through too (reason="unavailable") instead of getting 503.
func TestDryRun(t *testing.T) {
	servers := redistest.StartN(t, 3)
	st := &streamer{cancelled: map[string]time.Time{}}
	up := newUpstream(t, 0, st.serve)
	s := adminSite(t, servers, redistest.URLs(servers), "dry:", "dry_run", up)
	adm := newAdmClient(s)
	clients := nodeClients(t, servers, "")
	var sec secrets
	c := &http.Client{Timeout: 30 * time.Second}
	const dry = "caddy_redlock_dry_run_total"
	before := scrape(t, adm)

	holder := startStream(t, s.url+"/doc?d=3s")
	if !eventually(10*time.Second, func() bool { return adm.locks(t).Held == 1 }) {
		t.Fatal("the free key was not locked in dry run")
	}
	sec.collect(t, clients, "dry:/doc")
	start := time.Now()
	if code, body, _ := get(t, c, "GET", s.url+"/doc?d=0s&second=1", nil); code != 200 || !strings.HasSuffix(body, "done\n") {
		t.Errorf("would-be waiter: %d %q, want 200 served", code, tail(body, 1))
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("would-be waiter took %v: dry run must not wait", took)
	}
	release := holdKey(t, servers, "dry:", "/other", 5*time.Second)
	sec.collect(t, clients, "dry:/other")
	if code, _, _ := get(t, c, "GET", s.url+"/other?d=0s", nil); code != 200 {
		t.Errorf("key held by another client: %d, want 200", code)
	}
	release()
	after := scrape(t, adm)
	if d := metricValue(after, dry, `reason="busy"`) - max(metricValue(before, dry, `reason="busy"`), 0); d != 2 {
		t.Errorf("%s{reason=busy} grew by %v, want 2", dry, d)
	}
	if !s.logContains("redlock dry run", `"key":"/doc"`, `"reason":"busy"`) || !s.logContains("redlock dry run", `"key":"/other"`) {
		t.Error("no info log line names the keys dry run let through")
	}
	holder.wait(t, 20*time.Second)
	if holder.code != 200 || !strings.HasSuffix(holder.body, "done\n") {
		t.Errorf("holder: %d %v", holder.code, holder.err)
	}

	for _, srv := range servers[:2] {
		if err := srv.Pause(); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		if code, body, _ := get(t, c, "GET", fmt.Sprintf("%s/u/%d?d=0s", s.url, i), nil); code != 200 {
			t.Errorf("without quorum: %d %q, want 200 (dry run never answers 503)", code, body)
		}
	}
	if v := metricValue(scrape(t, adm), dry, `reason="unavailable"`) - max(metricValue(before, dry, `reason="unavailable"`), 0); v != 3 {
		t.Errorf("%s{reason=unavailable} grew by %v, want 3", dry, v)
	}
	for _, srv := range servers[:2] {
		if err := srv.Resume(); err != nil {
			t.Fatal(err)
		}
	}
	noKeysLeft(t, servers, "dry:")
	logs, _ := os.ReadFile(s.logFile)
	sec.check(t, map[string]string{"caddy log": string(logs), "admin": adm.all()})
}

// TestHoldMetric: caddy_redlock_hold_duration_seconds counts holds by how they ended:
// released (a lone request), handed_over (to a waiter of this instance), lost (force
// release while it ran), drained (client gone mid-stream), with sums matching how long
// the locks were held.
func TestHoldMetric(t *testing.T) {
	servers := redistest.StartN(t, 3)
	st := &streamer{cancelled: map[string]time.Time{}}
	up := newUpstream(t, 0, st.serve)
	s := adminSite(t, servers, redistest.URLs(servers), "hold:", "", up)
	adm := newAdmClient(s)
	c := &http.Client{Timeout: 30 * time.Second}
	const count, sum = "caddy_redlock_hold_duration_seconds_count", "caddy_redlock_hold_duration_seconds_sum"
	before := scrape(t, adm)
	delta := func(after, name, how string) float64 {
		return max(metricValue(after, name, `how="`+how+`"`), 0) - max(metricValue(before, name, `how="`+how+`"`), 0)
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
	time.Sleep(200 * time.Millisecond)
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
	if !strings.Contains(after, `caddy_redlock_hold_duration_seconds_bucket{how="released",le="0.001"}`) ||
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
