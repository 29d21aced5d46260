package caddyredlock

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// Two redlock blocks on one request (a site-wide block and one inside a route): keys of
// their own nest, and a key the request already holds through the block around is
// refused at once with an error that says so, not waited for until the wait runs out
// (the request would queue behind itself).
func TestNestedBlocksRefuseAKeyTwice(t *testing.T) {
	servers := redistest.StartN(t, 3)
	up := newUpstream(t, 0, nil)
	s := startCaddy(t, "", fmt.Sprintf(`
	route /twice/* {
		redlock {
			%[1]s
			prefix nest:
			key res
			ttl 2s
			wait 5s
		}
		redlock {
			%[1]s
			prefix nest:
			key res
			ttl 2s
			wait 5s
		}
		reverse_proxy %[2]s
	}
	route /two/* {
		redlock {
			%[1]s
			prefix nest:
			key outer
			wait 5s
		}
		redlock {
			%[1]s
			prefix nest:
			key inner
			node_timeout 300ms
			wait 5s
		}
		reverse_proxy %[2]s {
			header_up X-Lock-Key {http.redlock.key}
		}
	}`, redisLine(servers), up.addr))
	c := &http.Client{Timeout: 20 * time.Second}

	start := time.Now()
	code, _, _ := get(t, c, "GET", s.url+"/twice/a", nil)
	if took := time.Since(start); code != http.StatusInternalServerError || took > 3*time.Second {
		t.Fatalf("the same key twice: %d after %v, want 500 at once", code, took.Round(time.Millisecond))
	}
	if !eventually(2*time.Second, func() bool { return s.logContains("already held by this request", `"status":500`) }) {
		t.Error("the log does not say why the request was refused")
	}
	if code, body, _ := get(t, c, "GET", s.url+"/two/a", nil); code != http.StatusOK {
		t.Fatalf("two keys of their own: %d %q, want 200", code, body)
	}
	// Afterwards the key is free: the refusal took nothing.
	if code, body, _ := get(t, c, "GET", s.url+"/two/b", nil); code != http.StatusOK {
		t.Fatalf("again: %d %q", code, body)
	}
}
