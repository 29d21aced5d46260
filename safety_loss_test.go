package caddyredlock

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// A request cut by its lock's loss (or by Caddy exiting) is a cancellation to
// reverse_proxy, not an upstream failure: no passive-health failure (with max_fails 1 a
// healthy upstream would leave the rotation), no retry, and no error for handle_errors,
// which could proxy the request again, unlocked.

// cutUpstream is an upstream whose /slow/ requests work until Caddy cuts them, and that
// notes every request handle_errors sent it again.
type cutUpstream struct {
	*upstream
	inside chan string // paths of /slow/ requests, as they arrive

	mu      sync.Mutex
	again   []string // paths that came through handle_errors
	perPath map[string]int
}

func newCutUpstream(t *testing.T) *cutUpstream {
	u := &cutUpstream{inside: make(chan string, 8), perPath: map[string]int{}}
	u.upstream = newUpstream(t, 0, func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.perPath[r.URL.Path]++
		if r.Header.Get("X-Error-Route") != "" {
			u.again = append(u.again, r.URL.Path)
		}
		u.mu.Unlock()
		if r.Header.Get("X-Error-Route") == "" && len(r.URL.Path) > 6 && r.URL.Path[:6] == "/slow/" {
			u.inside <- r.URL.Path
			<-r.Context().Done() // until reverse_proxy lets go
			return
		}
		if r.Header.Get("X-Error-Route") != "" {
			io.WriteString(w, "again")
			return
		}
		io.WriteString(w, "ok")
	})
	return u
}

func (u *cutUpstream) hits(path string) (n int, again []string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.perPath[path], append([]string(nil), u.again...)
}

// upstreamFails reads reverse_proxy's passive-health failure count for addr from
// Caddy's admin API.
func upstreamFails(t *testing.T, s *site, addr string) int {
	t.Helper()
	resp, err := http.Get(s.admin + "/reverse_proxy/upstreams")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ups []struct {
		Address string `json:"address"`
		Fails   int    `json:"fails"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&ups); err != nil {
		t.Fatal(err)
	}
	for _, u := range ups {
		if u.Address == addr {
			return u.Fails
		}
	}
	t.Fatalf("upstream %s not in /reverse_proxy/upstreams: %+v", addr, ups)
	return 0
}

func lossSite(t *testing.T, servers []*redistest.Server, up *cutUpstream) *site {
	return startCaddy(t, "", fmt.Sprintf(`
	redlock {
		%s
		prefix loss:
		ttl 2s
		node_timeout 200ms
		wait 10s
	}
	reverse_proxy %[2]s {
		header_up X-Lock-Key {http.redlock.key}
		lb_retries 2
		fail_duration 1m
		max_fails 1
	}
	handle_errors {
		reverse_proxy %[2]s {
			header_up X-Error-Route 1
		}
	}`, redisLine(servers), up.addr))
}

// afterCut checks what a request cut while its upstream worked left behind: one
// upstream hit, nothing sent again through handle_errors, no failure counted against
// the upstream, which still serves the next request.
func afterCut(t *testing.T, s *site, up *cutUpstream, path string) {
	t.Helper()
	if n, again := up.hits(path); n != 1 || len(again) != 0 {
		t.Errorf("%s: %d upstream hits (want 1); sent again through handle_errors: %q", path, n, again)
	}
	if n := upstreamFails(t, s, up.addr); n != 0 {
		t.Errorf("%d passive-health failures counted against the upstream", n)
	}
	c := &http.Client{Timeout: 10 * time.Second}
	if code, body, _ := get(t, c, "GET", s.url+"/next", nil); code != 200 || body != "ok" {
		t.Errorf("next request: %d %q, want 200 %q (the upstream left the rotation?)", code, body, "ok")
	}
}

// Force released by an operator while the upstream works: the client gets 503 with
// Retry-After, and the proxy saw a cancellation.
func TestLossIsACancellationToTheProxy(t *testing.T) {
	servers := redistest.StartN(t, 3)
	up := newCutUpstream(t)
	s := lossSite(t, servers, up)
	adm := newAdmClient(s)
	c := &http.Client{Timeout: 10 * time.Second}

	type result struct {
		code int
		hdr  http.Header
	}
	done := make(chan result, 1)
	go func() {
		code, _, hdr := get(t, c, "GET", s.url+"/slow/forced", nil)
		done <- result{code, hdr}
	}()
	<-up.inside
	if code, body, _ := adm.do(t, "DELETE", "/redlock/keys?key=/slow/forced"); code != 200 {
		t.Fatalf("force release: %d %s", code, body)
	}
	r := <-done
	if r.code != http.StatusServiceUnavailable || r.hdr.Get("Retry-After") == "" {
		t.Errorf("lost lock: %d (Retry-After %q), want 503 with Retry-After", r.code, r.hdr.Get("Retry-After"))
	}
	afterCut(t, s, up, "/slow/forced")
	if !eventually(2*time.Second, func() bool { return s.logContains("lock lost", `"reason":"force_released"`) }) {
		t.Error("the loss was not logged with its reason")
	}
}

// The same for Caddy exiting: the handler cuts its requests (abortInflight, as Cleanup
// does when the process exits) with a cause that reads as a cancellation.
func TestExitCutIsACancellationToTheProxy(t *testing.T) {
	servers := redistest.StartN(t, 3)
	up := newCutUpstream(t)
	s := lossSite(t, servers, up)
	c := &http.Client{Timeout: 10 * time.Second}

	done := make(chan int, 1)
	go func() {
		code, _, _ := get(t, c, "GET", s.url+"/slow/exit", nil)
		done <- code
	}()
	<-up.inside
	var h *Handler // this site's (a draining request of an earlier test may be in the table)
	requests.mu.Lock()
	for e := range requests.m {
		if e.uri == "/slow/exit" {
			h = e.owner
		}
	}
	requests.mu.Unlock()
	if h == nil {
		t.Fatal("the request is not in the table")
	}
	h.abortInflight(5 * time.Second)
	if code := <-done; code == http.StatusBadGateway {
		t.Errorf("cut by the exit: %d, the proxy took it for an upstream failure", code)
	}
	afterCut(t, s, up, "/slow/exit")
}
