package caddyredlock

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
	"github.com/caddy-redlock/caddy-redlock/redlock"
)

// Work Caddy runs for a request outside the handler, once it has returned: the routes of
// an intercept around it (ordered before templates, so before redlock in a site) and
// handle_errors routes. A reverse_proxy there sends the request to the locked upstream
// again, so the locks stay held, renewed, until the request ends (endrule.go, "When").

// intercept buffers a 500 from the upstream, and its handle_response route proxies the
// request again (a fallback) once redlock's ServeHTTP has returned. Request 2 of the key
// queues meanwhile and must not reach the upstream before the fallback is done.
func TestInterceptRoutesRunUnderTheLock(t *testing.T) {
	skipShort(t) // 3-7 s; make explore's intercept, handleerrors and handleresponse shapes search the same ground
	servers := redistest.StartN(t, 3)
	wl := newWorkLog()
	up := serveOn(t, func(w http.ResponseWriter, r *http.Request) {
		id, what := roleOf(r, "X-Fallback", "fallback work")
		i := wl.begin(id, what)
		defer wl.end(i)
		if id == "1" && what == "work" {
			// Fails after a moment (request 2 queues behind it meanwhile); a chunked
			// body, so that the fallback's Content-Length is the only one.
			time.Sleep(300 * time.Millisecond)
			w.WriteHeader(http.StatusInternalServerError)
			io.WriteString(w, "failed")
			http.NewResponseController(w).Flush()
			return
		}
		time.Sleep(1500 * time.Millisecond)
		io.WriteString(w, what+" done")
	})
	s := startCaddy(t, "", fmt.Sprintf(`
	redlock {
		%s
		prefix icpt:
		key res
		ttl 3s
		wait 10s
	}
	intercept {
		@failed status 500
		handle_response @failed {
			reverse_proxy %s {
				header_up X-Lock-Key {http.redlock.key}
				header_up X-Fallback 1
			}
		}
	}
	reverse_proxy %s {
		header_up X-Lock-Key {http.redlock.key}
	}`, redisLine(servers), up, up))
	c := &http.Client{Timeout: 20 * time.Second}

	first := sendAsync(t, c, s.url+"/a", "1")
	if !waitState("res", stateHeld, 5*time.Second) {
		t.Log("request 1 was not seen holding the lock")
	}
	second := sendAsync(t, c, s.url+"/b", "2")
	t.Logf("request 1: %d, request 2: %d", <-first, <-second)
	wl.checkNoOverlap(t, "res")
}

// A 504 (response_header_timeout) goes to handle_errors 502 504 { reverse_proxy ... }
// (configuration.md scopes such routes by status), which runs the job again, longer than
// the ttl. The lock is renewed while it runs and drains one ttl after: request 2 of the
// key must not overlap it.
func TestHandleErrorsRunUnderTheLock(t *testing.T) {
	skipShort(t)
	servers := redistest.StartN(t, 3)
	wl := newWorkLog()
	up := serveOn(t, func(w http.ResponseWriter, r *http.Request) {
		id, what := roleOf(r, "X-Again", "handle_errors work")
		i := wl.begin(id, what)
		defer wl.end(i)
		d := 4 * time.Second // the re-proxied job: longer than the ttl
		switch {
		case id == "1" && what == "work":
			d = 400 * time.Millisecond // past response_header_timeout: 504
		case id != "1":
			d = 100 * time.Millisecond
		}
		select {
		case <-time.After(d):
		case <-r.Context().Done(): // attentive
			return
		}
		io.WriteString(w, what+" done")
	})
	s := startCaddy(t, "", fmt.Sprintf(`
	redlock {
		%s
		prefix herr:
		key res
		ttl 2s
		wait 15s
	}
	reverse_proxy %s {
		header_up X-Lock-Key {http.redlock.key}
		transport http {
			response_header_timeout 300ms
		}
	}
	handle_errors 502 504 {
		reverse_proxy %s {
			header_up X-Lock-Key {http.redlock.key}
			header_up X-Again 1
		}
	}`, redisLine(servers), up, up))
	c := &http.Client{Timeout: 30 * time.Second}

	first := sendAsync(t, c, s.url+"/a", "1")
	if !waitState("res", stateHeld, 5*time.Second) {
		t.Log("request 1 was not seen holding the lock")
	}
	second := sendAsync(t, c, s.url+"/b", "2")
	t.Logf("request 1: %d, request 2: %d", <-first, <-second)
	wl.checkNoOverlap(t, "res")
}

// A handler behind redlock returns a client error on a bodiless GET (file_server: 404),
// and handle_errors 404 sends the request to the locked upstream (the classic "static
// first, else the app" fallback). The client goes away while the error route's proxy
// runs: the request's context ends then, not when the route is done, and the upstream
// (deaf to its closed connection) may still be at work. The locks drain after routes
// Caddy ran past the handler, so request 2 of the key must not overlap it.
func TestClientGoneDuringErrorRouteDrains(t *testing.T) {
	skipShort(t) // 3-7 s; make explore's intercept, handleerrors and handleresponse shapes search the same ground
	servers := redistest.StartN(t, 3)
	wl := newWorkLog()
	up := serveOn(t, func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Req-Id")
		i := wl.begin(id, "fallback work")
		defer wl.end(i)
		d := 100 * time.Millisecond
		if id == "1" {
			d = 1500 * time.Millisecond // deaf to its closed connection, as a DB transaction is
		}
		time.Sleep(d)
		io.WriteString(w, "done")
	})
	root := t.TempDir() // empty: every file is a 404
	s := startCaddy(t, "", fmt.Sprintf(`
	root * %s
	redlock {
		%s
		prefix herrgone:
		key res
		ttl 2s
		wait 15s
	}
	file_server
	handle_errors 404 {
		reverse_proxy %s {
			header_up X-Lock-Key {http.redlock.key}
		}
	}`, root, redisLine(servers), up))
	c := &http.Client{Timeout: 20 * time.Second}

	first := sendAbort(c, s.url+"/a", "1", 400*time.Millisecond)
	if !waitState("res", stateHeld, 5*time.Second) {
		t.Log("request 1 was not seen holding the lock")
	}
	second := sendAsync(t, c, s.url+"/b", "2")
	t.Logf("request 1: %d (0: the client gave up), request 2: %d", <-first, <-second)
	time.Sleep(1500 * time.Millisecond) // request 1's upstream work ends
	wl.checkNoOverlap(t, "res")
}

// The same through intercept: the upstream answers 500 (a clean exchange for the
// handler), intercept holds it back and its handle_response route proxies the request
// again (a fallback). The client gives up while the fallback runs; the fallback's
// upstream is still at work, and request 2 must not overlap it.
func TestClientGoneDuringInterceptRouteDrains(t *testing.T) {
	skipShort(t) // 3-7 s; make explore's intercept, handleerrors and handleresponse shapes search the same ground
	servers := redistest.StartN(t, 3)
	wl := newWorkLog()
	up := serveOn(t, func(w http.ResponseWriter, r *http.Request) {
		id, what := roleOf(r, "X-Fallback", "fallback work")
		i := wl.begin(id, what)
		defer wl.end(i)
		if id == "1" && what == "work" {
			time.Sleep(100 * time.Millisecond)
			w.WriteHeader(http.StatusInternalServerError)
			io.WriteString(w, "failed")
			return
		}
		d := 100 * time.Millisecond
		if id == "1" {
			d = 1500 * time.Millisecond // the fallback: deaf to its closed connection
		}
		time.Sleep(d)
		io.WriteString(w, what+" done")
	})
	s := startCaddy(t, "", fmt.Sprintf(`
	redlock {
		%s
		prefix icptgone:
		key res
		ttl 2s
		wait 15s
	}
	intercept {
		@failed status 500
		handle_response @failed {
			reverse_proxy %s {
				header_up X-Fallback 1
			}
		}
	}
	reverse_proxy %s`, redisLine(servers), up, up))
	c := &http.Client{Timeout: 20 * time.Second}

	first := sendAbort(c, s.url+"/a", "1", 500*time.Millisecond)
	if !waitState("res", stateHeld, 5*time.Second) {
		t.Log("request 1 was not seen holding the lock")
	}
	second := sendAsync(t, c, s.url+"/b", "2")
	t.Logf("request 1: %d (0: the client gave up), request 2: %d", <-first, <-second)
	time.Sleep(1500 * time.Millisecond)
	wl.checkNoOverlap(t, "res")
}

// A request Caddy serves without a connection: templates' httpInclude runs a virtual GET
// through the server's handlers with a context.Background() context (Done() is nil). The
// handler's next fails (file_server: 404) and handle_errors 404 proxies to the locked
// upstream. A context that cannot end cannot be waited for: the locks drain at once, a
// ttl, longer than the error route's work. Request 2 of the key, sent directly, must not
// overlap the included request's fallback.
func TestVirtualRequestErrorRouteDrains(t *testing.T) {
	skipShort(t)
	servers := redistest.StartN(t, 3)
	wl := newWorkLog()
	up := serveOn(t, func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Req-Id")
		i := wl.begin(id, "fallback work")
		defer wl.end(i)
		d := 100 * time.Millisecond
		if id == "1" {
			d = 1500 * time.Millisecond
		}
		time.Sleep(d)
		io.WriteString(w, "fallback "+id)
	})
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "page.html"), []byte(`<p>{{httpInclude "/locked/x"}}</p>`), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startCaddy(t, "", fmt.Sprintf(`
	root * %s
	route {
		templates /page.html
		@locked path /locked/*
		handle @locked {
			redlock {
				%s
				prefix virt:
				key res
				ttl 2s
				wait 15s
			}
			file_server
		}
		file_server
	}
	handle_errors 404 {
		reverse_proxy %s
	}`, root, redisLine(servers), up))
	c := &http.Client{Timeout: 20 * time.Second}

	first := sendAsync(t, c, s.url+"/page.html", "1")
	if !eventually(5*time.Second, func() bool { return strings.Contains(wl.String(), "req 1") }) {
		t.Log("the included request's fallback was not seen at the upstream")
	}
	second := sendAsync(t, c, s.url+"/locked/y", "2")
	t.Logf("request 1 (page including /locked/x): %d, request 2 (/locked/y): %d", <-first, <-second)
	wl.checkNoOverlap(t, "res")
}

// A lost lock must not reach an intercept's routes. intercept { @failed status 5xx;
// handle_response @failed { reverse_proxy <the upstream> } } is the fallback pattern of
// TestInterceptRoutesRunUnderTheLock, matched by class. Request 1 is cut at max_hold
// (any loss does the same: a force release, a majority outage). The handler's 503 would
// go into intercept's recorder, which matches 5xx and would proxy the request again on
// Caddy's request, unlocked; so the handler aborts the response instead, and nothing
// runs after the loss. Request 2 of the key, through another instance, gets the key
// once its validity ends and must overlap nothing.
func TestLostLockCutsInterceptRoutes(t *testing.T) {
	skipShort(t) // 3-7 s; make explore's intercept, handleerrors and handleresponse shapes search the same ground
	servers := redistest.StartN(t, 3)
	wl := newWorkLog()
	up := serveOn(t, func(w http.ResponseWriter, r *http.Request) {
		id, what := roleOf(r, "X-Fallback", "fallback work")
		i := wl.begin(id, what)
		defer wl.end(i)
		d := 100 * time.Millisecond
		switch {
		case id == "1" && what == "work":
			d = 5 * time.Second // cut at max_hold
		case id == "1":
			d = 4 * time.Second // the fallback of the cut request
		}
		select {
		case <-time.After(d):
		case <-r.Context().Done(): // attentive: stops when Caddy cuts it
			return
		}
		io.WriteString(w, what+" done")
	})
	s := startCaddy(t, "", fmt.Sprintf(`
	redlock {
		%s
		prefix lostintercept:
		key res
		ttl 2s
		max_hold 1s
		wait 15s
	}
	intercept {
		@failed status 5xx
		handle_response @failed {
			reverse_proxy %s {
				header_up X-Fallback 1
			}
		}
	}
	reverse_proxy %s`, redisLine(servers), up, up))
	c := &http.Client{Timeout: 20 * time.Second}

	first := sendAbort(c, s.url+"/a", "1", 15*time.Second) // aborted: no status
	if !waitState("res", stateHeld, 5*time.Second) {
		t.Log("request 1 was not seen holding the lock")
	}
	// Request 2 of the key comes through another instance (a plain Redlock client on
	// the same nodes and prefix stands for it): it gets the key once request 1's
	// validity ends, renewals having stopped at max_hold.
	other, err := redlock.New(redistest.URLs(servers), redlock.Options{Prefix: "lostintercept:", TTL: 2 * time.Second, NodeTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	second := make(chan error, 1)
	go func() {
		l, err := other.Acquire(context.Background(), "res", redlock.AcquireOptions{Wait: 15 * time.Second})
		if err != nil {
			second <- err
			return
		}
		i := wl.begin("2", "work (other instance)")
		time.Sleep(100 * time.Millisecond)
		wl.end(i)
		second <- l.Release(context.Background())
	}()
	t.Logf("request 1: %d, request 2 (other instance): %v", <-first, <-second)
	wl.checkNoOverlap(t, "res")
	if strings.Contains(wl.String(), "req 1 fallback work") {
		t.Errorf("request 1's lock was lost (max_hold) and its request still reached the upstream again, through intercept:\n%s", wl)
	}
}
