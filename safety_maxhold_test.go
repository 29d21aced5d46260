package caddyredlock

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// max_hold behind the lock: what it measures, and what its abort leaves.

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
	if strings.Contains(fmt.Sprint(inflightRequests()), stateDraining) {
		t.Errorf("a request drains: %+v", inflightRequests())
	}
	noKeysLeft(t, servers, "maxholdwait:")
}
