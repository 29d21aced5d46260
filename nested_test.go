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

// Two redlock blocks on one request (a site-wide block and one inside a route). A key
// the request already holds through the block around is not taken again (the request
// would queue behind itself until its wait ran out): a block that asks for it in the
// same mode is served under the held lock at once, and one that asks for more (an
// exclusive lock where the request holds it shared) is refused at once with an error
// that says why. Blocks of different keys nest. Every block has the same options, so the
// test has one locker: several clients meeting fresh nodes at once would each see only
// part of them marked as a fresh start by it, and hold them back for a quarantine.
func TestNestedBlocksOnOneKey(t *testing.T) {
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
		reverse_proxy %[2]s {
			header_up X-Lock-Key {http.redlock.key}
		}
	}
	route /stronger/* {
		redlock {
			%[1]s
			prefix nest:
			key doc
			shared GET
			ttl 2s
			wait 5s
		}
		redlock {
			%[1]s
			prefix nest:
			key doc
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
			ttl 2s
			wait 5s
		}
		redlock {
			%[1]s
			prefix nest:
			key inner
			ttl 2s
			wait 5s
		}
		reverse_proxy %[2]s {
			header_up X-Lock-Key {http.redlock.key}
		}
	}`, redisLine(servers), up.addr))
	c := &http.Client{Timeout: 20 * time.Second}

	start := time.Now()
	if code, body, _ := get(t, c, "GET", s.url+"/twice/a", nil); code != http.StatusOK || time.Since(start) > 3*time.Second {
		t.Fatalf("the same key twice, same mode: %d %q after %v, want 200 at once", code, body, time.Since(start).Round(time.Millisecond))
	}
	start = time.Now()
	code, _, _ := get(t, c, "GET", s.url+"/stronger/a", nil)
	if took := time.Since(start); code != http.StatusInternalServerError || took > 3*time.Second {
		t.Fatalf("exclusive inside shared: %d after %v, want 500 at once", code, took.Round(time.Millisecond))
	}
	if !eventually(2*time.Second, func() bool { return s.logContains("already held by this request", `"status":500`) }) {
		t.Error("the log does not say why the request was refused")
	}
	if code, body, _ := get(t, c, "GET", s.url+"/two/a", nil); code != http.StatusOK {
		t.Fatalf("two keys of their own: %d %q, want 200", code, body)
	}
	if code, body, _ := get(t, c, "GET", s.url+"/twice/b", nil); code != http.StatusOK {
		t.Fatalf("again: %d %q", code, body)
	}
	if _, overlaps, _ := up.snapshot(); overlaps != 0 {
		t.Errorf("%d overlaps in the upstream", overlaps)
	}
}

// A redlock block in handle_errors with the request's own key (to lock the fallback's
// proxy: a refused request must not reach the upstream unlocked, configuration.md). The
// main block's next fails (file_server: 404), and its locks stay held until the request
// ends, error routes included: the error route's block finds the key held by the request
// (Caddy's request variables carry the list: error routes do not get the handler's
// context) and serves the fallback under that lock at once, instead of waiting for it.
func TestRedlockInErrorRouteServedUnderTheHeldLock(t *testing.T) {
	servers := redistest.StartN(t, 3)
	up := serveOn(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "fallback done")
	})
	root := t.TempDir()
	block := fmt.Sprintf(`redlock {
		%s
		prefix herrself:
		key res
		ttl 2s
		wait 3s
	}`, redisLine(servers))
	s := startCaddy(t, "", fmt.Sprintf(`
	root * %s
	%s
	file_server
	handle_errors 404 {
		%s
		reverse_proxy %s
	}`, root, block, block, up))
	c := &http.Client{Timeout: 20 * time.Second}
	start := time.Now()
	code, body, hdr := get(t, c, "GET", s.url+"/a", nil)
	took := time.Since(start)
	t.Logf("status %d after %v, body %q, Retry-After %q", code, took.Round(time.Millisecond), strings.TrimSpace(body), hdr.Get("Retry-After"))
	if code != http.StatusOK || took > 1500*time.Millisecond {
		t.Errorf("the error route's redlock of the request's own key waited for the request itself: status %d after %v (want the fallback's 200 at once)",
			code, took.Round(time.Millisecond))
	}
}
