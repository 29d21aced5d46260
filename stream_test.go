package caddyredlock

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
	"github.com/caddy-redlock/caddy-redlock/redlock"
)

// streamer is an upstream handler that writes a line every 100ms for the duration in the
// "d" query parameter and records when its request context ends early.
type streamer struct {
	mu        sync.Mutex
	cancelled map[string]time.Time // path -> when the upstream saw its request cancelled
}

func (s *streamer) serve(w http.ResponseWriter, r *http.Request) {
	d, _ := time.ParseDuration(r.URL.Query().Get("d"))
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(200)
	rc := http.NewResponseController(w)
	end := time.Now().Add(d)
	for i := 0; time.Now().Before(end); i++ {
		fmt.Fprintf(w, "line %d\n", i)
		_ = rc.Flush()
		select {
		case <-time.After(100 * time.Millisecond):
		case <-r.Context().Done():
			s.mu.Lock()
			s.cancelled[r.URL.Path] = time.Now()
			s.mu.Unlock()
			return
		}
	}
	io.WriteString(w, "done\n")
}

func (s *streamer) cancelledAt(path string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.cancelled[path]
	return at, ok
}

// TestStreamRenewalAndLoss: a response streaming for 4 x ttl keeps its lock the whole
// time (renewed every ttl/3); when a majority of nodes stops answering mid-stream, the
// request is cancelled before the lock's validity ends and the upstream sees it; max_hold
// ends a hold the same way.
func TestStreamRenewalAndLoss(t *testing.T) {
	skipShort(t)
	const ttl = time.Second
	servers := redistest.StartN(t, 5)
	st := &streamer{cancelled: map[string]time.Time{}}
	up := newUpstream(t, 0, st.serve)
	s := startCaddy(t, "", fmt.Sprintf(`
	handle /capped/* {
		redlock {
			%[1]s
			prefix stream:
			ttl 1s
			node_timeout 200ms
			max_hold 1500ms
		}
	%[2]s
	}
	handle {
		redlock {
			%[1]s
			prefix stream:
			ttl 1s
			node_timeout 200ms
		}
	%[2]s
	}`, redisLine(servers), proxyStreaming(up)))
	c := &http.Client{Timeout: 30 * time.Second}

	t.Run("held for 4 ttl", func(t *testing.T) {
		probe, err := redlock.New(redistest.URLs(servers), redlock.Options{Prefix: "stream:", TTL: ttl, NodeTimeout: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer probe.Close()
		type result struct {
			code int
			body string
			err  error
		}
		done := make(chan result, 1)
		hitsBefore, _, _ := up.snapshot()
		go func() {
			resp, err := c.Get(s.url + "/long?d=4s")
			if err != nil {
				done <- result{err: err}
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			done <- result{resp.StatusCode, string(b), err}
		}()
		// Probe like another Redlock client would, from when the stream holds the key (it
		// reached the upstream) until it ends: the key must never be free meanwhile.
		probes := 0
		if !eventually(10*time.Second, func() bool { hits, _, _ := up.snapshot(); return hits > hitsBefore }) {
			t.Fatal("the stream never reached the upstream")
		}
		for {
			select {
			case r := <-done:
				if r.err != nil || r.code != 200 || !strings.HasSuffix(r.body, "done\n") {
					t.Fatalf("stream: %d %v, body ends %q", r.code, r.err, tail(r.body, 2))
				}
				if probes < 10 {
					t.Errorf("only %d probes during the stream", probes)
				}
				return
			case <-time.After(150 * time.Millisecond):
			}
			l, err := probe.Acquire(context.Background(), "/long", redlock.AcquireOptions{})
			if err == nil {
				_ = l.Release(context.Background())
				select {
				case r := <-done: // the stream had just ended
					if r.code != 200 {
						t.Fatalf("stream: %d %v", r.code, r.err)
					}
					return
				case <-time.After(time.Second):
				}
				t.Fatalf("another client took the key while the stream ran (after %d probes)", probes)
			}
			if !isBusy(err) {
				t.Fatalf("probe: %v", err)
			}
			probes++
		}
	})

	t.Run("majority paused", func(t *testing.T) {
		lostBefore := metricTotal(t, metrics.lost, nil)
		resp, err := c.Get(s.url + "/lost?d=20s")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		// Let it renew a few times, then take the majority away.
		buf := make([]byte, 64)
		deadline := time.Now().Add(1200 * time.Millisecond)
		for time.Now().Before(deadline) {
			if _, err := resp.Body.Read(buf); err != nil {
				t.Fatalf("stream ended early: %v", err)
			}
		}
		for _, srv := range servers[:3] {
			if err := srv.Pause(); err != nil {
				t.Fatal(err)
			}
		}
		pausedAt := time.Now()
		body, readErr := io.ReadAll(resp.Body)
		if readErr == nil && strings.HasSuffix(string(body), "done\n") {
			t.Fatal("the stream ran to its end without a lock")
		}
		var cancelAt time.Time
		if !eventually(5*time.Second, func() bool { var ok bool; cancelAt, ok = st.cancelledAt("/lost"); return ok }) {
			t.Fatal("the upstream never saw its request cancelled")
		}
		// Validity left at the pause is at most ttl - drift (renewals can't reach a quorum
		// after it); the slack covers delivering the cancellation over TCP.
		if d := cancelAt.Sub(pausedAt); d > ttl+250*time.Millisecond {
			t.Errorf("upstream cancelled %v after the majority stopped; the lock's validity was at most %v", d, ttl)
		} else {
			t.Logf("upstream cancelled %v after the majority stopped (ttl %v)", d.Round(time.Millisecond), ttl)
		}
		if metricTotal(t, metrics.lost, nil) == lostBefore {
			t.Error("lost lock not counted")
		}
		if !eventually(2*time.Second, func() bool { return s.logContains("lock lost", "/lost", `"reason":"expired"`) }) {
			t.Error("lost lock not logged")
		}
		for _, srv := range servers[:3] {
			if err := srv.Resume(); err != nil {
				t.Fatal(err)
			}
		}
		if !eventually(5*time.Second, func() bool { return len(inflightRequests()) == 0 }) {
			t.Errorf("request still in flight: %+v", inflightRequests())
		}
		noKeysLeft(t, servers, "stream:")
	})

	t.Run("max_hold", func(t *testing.T) {
		start := time.Now()
		resp, err := c.Get(s.url + "/capped/x?d=10s")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.HasSuffix(string(body), "done\n") {
			t.Fatal("the stream outlived max_hold")
		}
		if _, ok := st.cancelledAt("/capped/x"); !ok {
			if !eventually(2*time.Second, func() bool { _, ok := st.cancelledAt("/capped/x"); return ok }) {
				t.Fatal("the upstream never saw the max_hold cancellation")
			}
		}
		if d := time.Since(start); d < 1500*time.Millisecond {
			t.Errorf("cancelled after %v, before max_hold", d)
		}
		if !eventually(2*time.Second, func() bool { return s.logContains("lock lost", "/capped/x", `"reason":"max_hold"`) }) {
			t.Error("max_hold not logged")
		}
		noKeysLeft(t, servers, "stream:")
	})
}
