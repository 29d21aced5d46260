package caddyredlock

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
	"github.com/caddy-redlock/caddy-redlock/redlock"
)

// reverse_proxy gives up on its own (response_header_timeout) while the upstream, which
// ignores cancellation as a database transaction would, keeps working for 1.5s. The next
// request for the key, queued once the first reached the upstream, must not reach it until
// the first is done there: the lock drains one ttl instead of being handed over.
func TestProxyTimeoutDrains(t *testing.T) {
	skipShort(t)
	servers := redistest.StartN(t, 3)
	up := newUpstream(t, 0, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(1500 * time.Millisecond) // its work, deaf to the proxy giving up: what the drain must outlast
		fmt.Fprint(w, "done")
	})
	s := startCaddy(t, "", fmt.Sprintf(`
	redlock {
		%s
		prefix proxyto:
		ttl 2s
		wait 10s
	}
	reverse_proxy %s {
		header_up X-Lock-Key {http.redlock.key}
		transport http {
			response_header_timeout 300ms
		}
	}`, redisLine(servers), up.addr))

	c := &http.Client{Timeout: 15 * time.Second}
	codes := make([]int, 2)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			codes[i], _, _ = get(t, c, "POST", s.url+"/tx", nil)
		})
		if i == 0 && !eventually(10*time.Second, func() bool { hits, _, _ := up.snapshot(); return hits == 1 }) {
			t.Fatal("the first request never reached the upstream") // the second queues behind it
		}
	}
	wg.Wait()
	if codes[0] != http.StatusGatewayTimeout {
		t.Errorf("first request: %d, want 504 from the proxy's timeout", codes[0])
	}
	if hits, overlaps, _ := up.snapshot(); overlaps != 0 {
		t.Fatalf("%d overlaps at the upstream in %d hits: the lock was handed on while the upstream still worked", overlaps, hits)
	}
	if codes[1] != http.StatusGatewayTimeout && codes[1] != http.StatusOK {
		t.Errorf("second request: %d", codes[1])
	}
}

// A key of another type under the lock name (another client's lock, e.g. Redisson's
// hash) is held by someone else: 423 with Retry-After, never "unavailable", never served
// unlocked through on_unavailable bypass.
func TestForeignTypeIsBusyNotBypassed(t *testing.T) {
	servers := redistest.StartN(t, 5)
	up := newUpstream(t, 0, nil)
	s := startCaddy(t, "", fmt.Sprintf(`
	redlock {
		%s
		prefix res:
		wait 300ms
		on_unavailable bypass
	}
%s`, redisLine(servers), proxyTo(up)))
	ctx := context.Background()
	for _, srv := range servers {
		rc := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		if err := rc.HSet(ctx, "res:/r/hash", "holder", 1).Err(); err != nil {
			t.Fatal(err)
		}
		rc.Close()
	}
	c := &http.Client{Timeout: 10 * time.Second}
	code, body, hdr := get(t, c, "GET", s.url+"/r/hash", nil)
	if code != 423 || hdr.Get("Retry-After") == "" {
		t.Fatalf("foreign hash on every node: %d %q (Retry-After %q), want 423 with Retry-After", code, body, hdr.Get("Retry-After"))
	}
	if hits, _, _ := up.snapshot(); hits != 0 {
		t.Fatalf("upstream hit %d times while another client held the key", hits)
	}
	if s.logContains("UNLOCKED") {
		t.Fatal("the request was served unlocked")
	}
}

// A closed locker (ErrClosed) is a shutdown, not an outage: never served unlocked, even
// with on_unavailable bypass.
func TestClosedLockerNeverBypasses(t *testing.T) {
	h := &Handler{s: &settings{bypass: true, busyStatus: 423}, logger: zap.NewNop()}
	called := false
	next := caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error {
		called = true
		return nil
	})
	w := httptest.NewRecorder()
	r := httptest.NewRequest("GET", "/k", nil)
	err := h.acquireFailed(w, r, next, &inflight{key: "/k", mode: modeExclusive}, 0, redlock.ErrClosed)
	var he caddyhttp.HandlerError
	if called || !errors.As(err, &he) || he.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("ErrClosed with bypass: next called %v, error %v; want 503 and next not called", called, err)
	}
	if w.Header().Get("Retry-After") == "" {
		t.Error("no Retry-After on the 503")
	}
}
