package caddyredlock

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// reverse_proxy retries (lb_retries) behind the lock: an attempt that may have reached
// its upstream keeps the lock draining after a retry succeeded; a retry after a dial
// error (the upstream never saw the request) does not.

// serveAlso serves the upstream's handler (and so its ledger) on ln as well.
func (u *upstream) serveAlso(t *testing.T, ln net.Listener) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = u.srv.Serve(ln)
	}()
	t.Cleanup(func() {
		_ = u.srv.Close()
		<-done
	})
}

// localAddr is the address of the listener that accepted r.
func localAddr(r *http.Request) string {
	a, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if a == nil {
		return ""
	}
	return a.String()
}

// The first upstream gets the request, works on it (deaf to the proxy giving up, as a
// database transaction would be) past response_header_timeout; reverse_proxy retries on
// the second, which answers. The response is a 200, but the first attempt still runs:
// the lock drains instead of going to the next request, which must not reach either
// upstream while the first attempt is inside (one ledger for both).
func TestRetryAfterWrittenAttemptDrains(t *testing.T) {
	skipShort(t)
	servers := redistest.StartN(t, 3)
	slowLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	slowAddr := slowLn.Addr().String()
	free, freeSlow := newGate(t)
	// The retry overlaps the first attempt by design (one request, one lock); what
	// must not is another request.
	var firstInside, overlapped atomic.Bool
	up := newUpstream(t, 0, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Req-Id") != "1" && firstInside.Load() {
			overlapped.Store(true)
		}
		if localAddr(r) == slowAddr {
			firstInside.Store(true)
			<-free
			firstInside.Store(false)
		}
		io.WriteString(w, "ok")
	})
	up.serveAlso(t, slowLn)
	s := startCaddy(t, "", fmt.Sprintf(`
	redlock {
		%s
		prefix retry:
		ttl 2s
		wait 10s
	}
	reverse_proxy %s %s {
		lb_policy first
		lb_retries 1
		fail_duration 1m
		max_fails 1
		header_up X-Lock-Key {http.redlock.key}
		transport http {
			response_header_timeout 300ms
		}
	}`, redisLine(servers), slowAddr, up.addr))
	c := &http.Client{Timeout: 20 * time.Second}

	if code, body, _ := get(t, c, "GET", s.url+"/doc", http.Header{"X-Req-Id": {"1"}}); code != 200 || body != "ok" {
		t.Fatalf("first request: %d %q, want 200 from the retry", code, body)
	}
	draining := func() bool {
		rs := inflightRequests()
		return len(rs) == 1 && rs[0].State == stateDraining
	}
	if !eventually(2*time.Second, draining) {
		t.Errorf("the retried request's lock is not draining while its first attempt runs: %+v", inflightRequests())
	}
	second := make(chan int, 1)
	go func() {
		code, _, _ := get(t, c, "GET", s.url+"/doc", http.Header{"X-Req-Id": {"2"}})
		second <- code
	}()
	waiting := func() bool {
		for _, ri := range inflightRequests() {
			if ri.State == stateWaiting {
				return true
			}
		}
		return len(second) > 0
	}
	if !eventually(5*time.Second, waiting) {
		t.Errorf("the second request neither waits nor ended: %+v", inflightRequests())
	}
	freeSlow() // the first attempt ends; the drain still holds the key
	if code := <-second; code != 200 {
		t.Errorf("second request: %d", code)
	}
	if overlapped.Load() {
		t.Error("the second request reached an upstream while the first one's first attempt was still inside")
	}
	noKeysLeft(t, servers, "retry:")
}

// The first upstream refuses connections: reverse_proxy's retry after that dial error
// reaches the second, and nothing ran anywhere else, so the lock goes at once (no
// drain). A ttl of 30s would make a drain plain.
func TestRetryAfterDialErrorDoesNotDrain(t *testing.T) {
	servers := redistest.StartN(t, 3)
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	up := newUpstream(t, 0, nil)
	s := startCaddy(t, "", fmt.Sprintf(`
	redlock {
		%s
		prefix retrydial:
		ttl 30s
		wait 10s
	}
	reverse_proxy %s %s {
		lb_policy first
		lb_retries 2
		fail_duration 1m
		max_fails 1
		header_up X-Lock-Key {http.redlock.key}
	}`, redisLine(servers), deadAddr, up.addr))
	c := &http.Client{Timeout: 20 * time.Second}

	if code, body, _ := get(t, c, "GET", s.url+"/doc", nil); code != 200 || body != "ok /doc" {
		t.Fatalf("request: %d %q, want 200 from the retry", code, body)
	}
	// finish has decided before the client had its response (ServeHTTP returns first).
	// Only this test's request: an earlier test's cut request may still drain its own.
	for _, ri := range inflightRequests() {
		if ri.Key == "/doc" && ri.State == stateDraining {
			t.Fatalf("the lock drains after a retry that followed a dial error: %+v", ri)
		}
	}
	if !s.logContains("upstream roundtrip", deadAddr, "connection refused") {
		t.Fatalf("no dial error logged for %s: the test did not retry", deadAddr)
	}
	noKeysLeft(t, servers, "retrydial:")
	if !eventually(3*time.Second, func() bool {
		for _, ri := range inflightRequests() {
			if ri.Key == "/doc" {
				return false
			}
		}
		return true
	}) {
		t.Errorf("in flight: %+v", inflightRequests())
	}
}

// A reverse_proxy nested in another's handle_response (the X-Accel-Redirect pattern: the
// first hop answers at once, the route proxies the real work) retries after an attempt
// that was written and still runs (a response_header_timeout does not stop the
// upstream). {http.reverse_proxy.retries} holds only the outer proxy's count (0) once
// its loop ends, so the drain must come from the client trace: a request written and
// never answered (exchange.unanswered).
func TestNestedProxyRetryDrains(t *testing.T) {
	skipShort(t) // 3-7 s; make explore's intercept, handleerrors and handleresponse shapes search the same ground
	servers := redistest.StartN(t, 3)
	wl := newWorkLog()
	// The first hop: answers at once, the real work is elsewhere.
	hop := serveOn(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Accel-Redirect", "/work")
		w.WriteHeader(http.StatusNoContent)
	})
	// The slow upstream: works 1.5s, deaf to the proxy giving up.
	slow := serveOn(t, func(w http.ResponseWriter, r *http.Request) {
		i := wl.begin(r.Header.Get("X-Req-Id"), "slow attempt")
		defer wl.end(i)
		time.Sleep(1500 * time.Millisecond)
		io.WriteString(w, "slow done")
	})
	// The fast upstream the retry reaches.
	fast := serveOn(t, func(w http.ResponseWriter, r *http.Request) {
		i := wl.begin(r.Header.Get("X-Req-Id"), "fast attempt")
		defer wl.end(i)
		time.Sleep(50 * time.Millisecond)
		io.WriteString(w, "fast done")
	})
	s := startCaddy(t, "", fmt.Sprintf(`
	redlock {
		%s
		prefix nested:
		key res
		ttl 3s
		wait 10s
	}
	reverse_proxy %s {
		header_up X-Lock-Key {http.redlock.key}
		@accel header X-Accel-Redirect *
		handle_response @accel {
			reverse_proxy %s %s {
				lb_policy first
				lb_retries 1
				fail_duration 1m
				max_fails 1
				header_up X-Lock-Key {http.redlock.key}
				transport http {
					response_header_timeout 300ms
				}
			}
		}
	}`, redisLine(servers), hop, slow, fast))
	c := &http.Client{Timeout: 20 * time.Second}

	code, body, _ := get(t, c, "GET", s.url+"/a", http.Header{"X-Req-Id": {"1"}})
	t.Logf("request 1: %d %q", code, body)
	if code != 200 || body != "fast done" {
		t.Fatalf("request 1: %d %q, want 200 from the retry", code, body)
	}
	draining := waitState("res", stateDraining, time.Second)
	t.Logf("request 1's lock draining after its inner retry: %v", draining)
	code2, body2, _ := get(t, c, "GET", s.url+"/b", http.Header{"X-Req-Id": {"2"}})
	t.Logf("request 2: %d %q", code2, body2)
	time.Sleep(200 * time.Millisecond)
	wl.checkNoOverlap(t, "res")
}
