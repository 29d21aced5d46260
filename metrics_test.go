package caddyredlock

import (
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// scrape reads Caddy's admin /metrics.
func scrape(t testing.TB, adm *admClient) string {
	t.Helper()
	code, body, _ := adm.do(t, "GET", "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	return string(body)
}

// metricValue sums the samples of name whose labels include every label given as
// `k="v"` (Prometheus text format). It returns -1 when no sample matches.
func metricValue(text, name string, labels ...string) float64 {
	sum, found := 0.0, false
	for _, line := range strings.Split(text, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		series, val := line[:sp], line[sp+1:]
		metric, lbls, _ := strings.Cut(series, "{")
		if metric != name {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(lbls, l)
		}
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(val, 64)
		if err != nil {
			continue
		}
		sum, found = sum+v, true
	}
	if !found {
		return -1
	}
	return sum
}

// TestMetrics: the caddy_redlock_ metrics in Caddy's /metrics move as requests are
// served, found busy, wait, hold and lose their locks, and as a node fails; the counts
// survive a config reload; no label shows a key, a URI or a lock value.
func TestMetrics(t *testing.T) {
	skipShort(t)
	servers := redistest.StartN(t, 3)
	st := &streamer{cancelled: map[string]time.Time{}}
	up := newUpstream(t, 0, st.serve)
	body := fmt.Sprintf(`
	redlock /busy/* {
		%[1]s
		prefix met:
		ttl 1500ms
		node_timeout 200ms
		wait 0
	}
	redlock {
		%[1]s
		prefix met:
		ttl 1500ms
		node_timeout 200ms
		wait 30s
	}
%[2]s`, redisLine(servers), proxyStreaming(up))
	s := startCaddy(t, "", body)
	adm := newAdmClient(s)
	clients := nodeClients(t, servers, "")
	var sec secrets
	c := &http.Client{Timeout: 30 * time.Second}
	const (
		acquireCount = "caddy_redlock_acquire_duration_seconds_count"
		waitCount    = "caddy_redlock_wait_seconds_count"
	)
	// delta is how much a series grew since before (a missing series counts as 0).
	delta := func(before, after string, name string, labels ...string) float64 {
		return max(metricValue(after, name, labels...), 0) - max(metricValue(before, name, labels...), 0)
	}

	before := scrape(t, adm)
	if metricValue(before, "caddy_redlock_held_locks") != 0 || metricValue(before, "caddy_redlock_waiting_requests") != 0 {
		t.Errorf("gauges missing or not 0 at start")
	}

	t.Run("served", func(t *testing.T) {
		for i := range 5 {
			if code, b, _ := get(t, c, "GET", fmt.Sprintf("%s/k/%d?d=0s", s.url, i), nil); code != 200 {
				t.Fatalf("request %d: %d %q", i, code, b)
			}
		}
		after := scrape(t, adm)
		if d := delta(before, after, acquireCount, `result="acquired"`); d != 5 {
			t.Errorf("acquired count grew by %v, want 5", d)
		}
		if d := delta(before, after, waitCount, `result="acquired"`); d != 0 {
			t.Errorf("wait count grew by %v for requests that found their keys free", d)
		}
		for _, srv := range servers {
			if d := delta(before, after, "caddy_redlock_node_rtt_seconds_count", `node="`+srv.Addr()+`"`, `op="acquire"`); d < 1 {
				t.Errorf("no acquire round trips counted for node %s", srv.Addr())
			}
		}
	})

	t.Run("busy", func(t *testing.T) {
		b0 := scrape(t, adm)
		holdKey(t, servers, "met:", "/busy/x", 5*time.Second)
		sec.collect(t, clients, "met:/busy/x")
		if code, b, _ := get(t, c, "GET", s.url+"/busy/x?d=0s", nil); code != 423 {
			t.Fatalf("want 423, got %d %q", code, b)
		}
		after := scrape(t, adm)
		if d := delta(b0, after, acquireCount, `result="busy"`); d != 1 {
			t.Errorf("busy count grew by %v, want 1", d)
		}
		if d := delta(b0, after, waitCount, `result="busy"`); d != 1 {
			t.Errorf("busy wait count grew by %v, want 1", d)
		}
	})

	t.Run("held, waiting, renewed, lost", func(t *testing.T) {
		b0 := scrape(t, adm)
		holder := startStream(t, s.url+"/doc?d=30s")
		if !eventually(10*time.Second, func() bool { return metricValue(scrape(t, adm), "caddy_redlock_held_locks") == 1 }) {
			t.Fatal("held_locks never 1")
		}
		sec.collect(t, clients, "met:/doc")
		waiter := startStream(t, s.url+"/doc?d=0s")
		if !eventually(10*time.Second, func() bool { return metricValue(scrape(t, adm), "caddy_redlock_waiting_requests") == 1 }) {
			t.Fatal("waiting_requests never 1")
		}
		// Renewals every 500ms.
		if !eventually(5*time.Second, func() bool {
			return delta(b0, scrape(t, adm), "caddy_redlock_renewals_total", `result="ok"`) >= 2
		}) {
			t.Error("renewals_total{result=ok} did not move while the stream ran")
		}
		sec.collect(t, clients, "met:/doc")
		var r releaseJSON
		adm.json(t, "DELETE", "/redlock/keys?key=/doc", &r)
		holder.wait(t, 10*time.Second)
		waiter.wait(t, 10*time.Second)
		if waiter.code != 200 {
			t.Errorf("waiter: %d %v", waiter.code, waiter.err)
		}
		after := scrape(t, adm)
		if d := delta(b0, after, "caddy_redlock_locks_lost_total", `reason="force_released"`); d != 1 {
			t.Errorf("locks_lost_total{reason=force_released} grew by %v, want 1", d)
		}
		if d := delta(b0, after, waitCount, `result="acquired"`); d != 1 {
			t.Errorf("the waiter's wait not counted (grew by %v)", d)
		}
		if !eventually(10*time.Second, func() bool {
			m := scrape(t, adm)
			return metricValue(m, "caddy_redlock_held_locks") == 0 && metricValue(m, "caddy_redlock_waiting_requests") == 0
		}) {
			t.Error("gauges did not go back to 0")
		}
	})

	t.Run("node errors", func(t *testing.T) {
		addr := servers[2].Addr()
		b0 := scrape(t, adm)
		if err := servers[2].Pause(); err != nil {
			t.Fatal(err)
		}
		ok := eventually(15*time.Second, func() bool {
			return delta(b0, scrape(t, adm), "caddy_redlock_node_errors_total", `node="`+addr+`"`) >= 1
		})
		if err := servers[2].Resume(); err != nil {
			t.Fatal(err)
		}
		if !ok {
			t.Fatalf("no node errors counted for paused node %s", addr)
		}
		if d := delta(b0, scrape(t, adm), "caddy_redlock_node_errors_total", `node="`+servers[0].Addr()+`"`); d != 0 {
			t.Errorf("errors counted for a healthy node: %v", d)
		}
		if !eventually(10*time.Second, func() bool { return s.logContains("redis node not answering", addr) }) {
			t.Error("failing node not logged")
		}
		if !eventually(15*time.Second, func() bool { return s.logContains("redis node answering again", addr) }) {
			t.Error("recovered node not logged")
		}
	})

	t.Run("reload keeps counting", func(t *testing.T) {
		b0 := scrape(t, adm)
		s.reload(t, body)
		if code, b, _ := get(t, c, "GET", s.url+"/after-reload?d=0s", nil); code != 200 {
			t.Fatalf("after reload: %d %q", code, b)
		}
		after := scrape(t, adm)
		if d := delta(b0, after, acquireCount, `result="acquired"`); d != 1 {
			t.Errorf("after a reload the acquired count grew by %v, want 1 (from %v)", d, metricValue(b0, acquireCount, `result="acquired"`))
		}
	})

	// Every metric is there (the vectors show once they have a sample), with its type.
	final := scrape(t, adm)
	for _, m := range []string{"acquire_duration_seconds histogram", "wait_seconds histogram", "held_locks gauge",
		"waiting_requests gauge", "renewals_total counter", "locks_lost_total counter", "node_errors_total counter",
		"node_rtt_seconds histogram"} {
		if !strings.Contains(final, "# TYPE caddy_redlock_"+m+"\n") {
			t.Errorf("/metrics has no %s", m)
		}
	}
	// Labels: results, reasons, ops, node addresses and the block's name only; never keys
	// or URIs. The default name holds the prefix ("met: @ nodes"): config, not a key.
	for _, line := range strings.Split(final, "\n") {
		line = nameLabel.ReplaceAllString(line, "")
		if strings.HasPrefix(line, "caddy_redlock_") && (strings.Contains(line, "/doc") || strings.Contains(line, "/k/") ||
			strings.Contains(line, "?d=") || strings.Contains(line, "met:")) {
			t.Errorf("metric label shows a key or URI: %s", line)
		}
	}
	logs, _ := os.ReadFile(s.logFile)
	sec.check(t, map[string]string{"/metrics": final, "caddy log": string(logs), "admin responses": adm.all()})
}

// nameLabel matches a series' name label, whose default value holds the prefix.
var nameLabel = regexp.MustCompile(`name="[^"]*"`)

// The cached children are the vector's own: an observation through the cache shows in
// the vector under its labels, and a second lookup returns the same child.
func TestObserverCacheIsTheVectorsChild(t *testing.T) {
	vec := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "test_observer_cache"}, []string{"name", "mode", "result"})
	o := observer(vec, "n", "exclusive", resultAcquired)
	if o2 := observer(vec, "n", "exclusive", resultAcquired); o2 != o {
		t.Fatal("second lookup returned another child")
	}
	o.Observe(1)
	observer(vec, "n", "shared", resultAcquired).Observe(2)
	var m dto.Metric
	if err := vec.WithLabelValues("n", "exclusive", resultAcquired).(prometheus.Histogram).Write(&m); err != nil {
		t.Fatal(err)
	}
	if got := m.GetHistogram().GetSampleCount(); got != 1 {
		t.Fatalf("exclusive child has %d samples, want 1", got)
	}
}

// What a request pays for its two histogram observations (acquire, hold): the cached
// child against a lookup by label values on every request.
func BenchmarkObserveRequest(b *testing.B) {
	b.Run("WithLabelValues", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			metrics.acquire.WithLabelValues("bench", "exclusive", resultAcquired).Observe(0.001)
			metrics.hold.WithLabelValues("bench", "exclusive", holdReleased).Observe(0.002)
		}
	})
	b.Run("cached", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			countAcquire("bench", "exclusive", resultAcquired, time.Millisecond)
			observeHold("bench", "exclusive", holdReleased, 2*time.Millisecond)
		}
	})
}
