package caddyredlock

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// max_hold behind the lock: what it measures, and what its abort leaves.

// max_hold cuts a request whose upstream works on, deaf to the cut (as a database
// transaction would be). The lock is lost here but still stands on a majority, and the
// work may still run: the key is kept (draining) instead of deleted at once, and the
// next request, queued meanwhile, does not reach the upstream while the first is inside.
func TestMaxHoldAbortKeepsTheKey(t *testing.T) {
	skipShort(t)
	servers := redistest.StartN(t, 3)
	free, freeFirst := newGate(t)
	var firstInside, overlapped atomic.Bool
	up := newUpstream(t, 0, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Req-Id") == "1" {
			firstInside.Store(true)
			<-free
			firstInside.Store(false)
		} else if firstInside.Load() {
			overlapped.Store(true)
		}
		io.WriteString(w, "ok")
	})
	s := startCaddy(t, "", fmt.Sprintf(`
	redlock {
		%s
		prefix maxhold:
		ttl 3s
		max_hold 1s
		wait 20s
	}
%s`, redisLine(servers), proxyTo(up)))
	c := &http.Client{Timeout: 20 * time.Second}

	first := make(chan int, 1)
	go func() {
		code, _, _ := get(t, c, "POST", s.url+"/job", http.Header{"X-Req-Id": {"1"}})
		first <- code
	}()
	if !eventually(5*time.Second, firstInside.Load) {
		t.Fatal("the first request never reached the upstream")
	}
	second := make(chan int, 1)
	go func() {
		code, _, _ := get(t, c, "POST", s.url+"/job", http.Header{"X-Req-Id": {"2"}})
		second <- code
	}()
	if code := <-first; code == 200 {
		t.Fatal("the first request outlived max_hold")
	}
	if !eventually(2*time.Second, func() bool { return s.logContains("lock lost", `"reason":"max_hold"`) }) {
		t.Fatal("the first request was not cut by max_hold")
	}
	var onNodes []string
	if !eventually(2*time.Second, func() bool {
		rs := inflightRequests()
		onNodes = lockKeysOn(t, servers, "maxhold:")
		return len(rs) > 0 && rs[0].State == stateDraining && len(onNodes) >= 2
	}) {
		t.Errorf("after the max_hold cut: %+v, key on %q; want the first request draining and its key on a majority", inflightRequests(), onNodes)
	}
	freeFirst()
	if code := <-second; code != 200 {
		t.Errorf("second request: %d", code)
	}
	if overlapped.Load() {
		t.Error("the second request reached the upstream while the request cut at max_hold was still inside")
	}
	noKeysLeft(t, servers, "maxhold:")
}

// max_hold measures the hold, from when the lock was taken: a request that waited
// longer than max_hold for its key still gets max_hold upstream. Its upstream answers
// after 300ms unless cancelled first.
func TestMaxHoldCountsFromTheAcquire(t *testing.T) {
	skipShort(t)
	servers := redistest.StartN(t, 3)
	up := newUpstream(t, 0, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(300 * time.Millisecond):
			io.WriteString(w, "ok")
		case <-r.Context().Done():
		}
	})
	s := startCaddy(t, "", fmt.Sprintf(`
	redlock {
		%s
		prefix maxholdwait:
		ttl 3s
		max_hold 2s
		wait 20s
	}
%s`, redisLine(servers), proxyTo(up)))
	c := &http.Client{Timeout: 20 * time.Second}

	release := holdKey(t, servers, "maxholdwait:", "/doc", 3*time.Second)
	type result struct {
		code int
		body string
	}
	done := make(chan result, 1)
	go func() {
		code, body, _ := get(t, c, "POST", s.url+"/doc", nil)
		done <- result{code, body}
	}()
	// Until it has waited longer than max_hold.
	if !eventually(10*time.Second, func() bool {
		rs := inflightRequests()
		return len(rs) == 1 && rs[0].State == stateWaiting && time.Since(rs[0].Since) > 2500*time.Millisecond
	}) {
		t.Fatalf("the request is not waiting: %+v", inflightRequests())
	}
	release()
	if r := <-done; r.code != 200 || r.body != "ok" {
		t.Errorf("after waiting longer than max_hold: %d %q, want the upstream's 200", r.code, r.body)
	}
	if s.logContains("lock lost", `"reason":"max_hold"`) {
		t.Error("max_hold cut a request that held its lock for 300ms")
	}
	if strings.Contains(fmt.Sprint(inflightRequests()), string(stateDraining)) {
		t.Errorf("a request drains: %+v", inflightRequests())
	}
	noKeysLeft(t, servers, "maxholdwait:")
}
