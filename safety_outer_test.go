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

// Work Caddy runs for a request outside the handler, once it has returned: the routes of
// an intercept around it (ordered before templates, so before redlock in a site) and
// handle_errors routes. A reverse_proxy there sends the request to the locked upstream
// again, so the locks stay held, renewed, until the request ends (endrule.go, "When").

// intercept buffers a 500 from the upstream, and its handle_response route proxies the
// request again (a fallback) once redlock's ServeHTTP has returned. Request 2 of the key
// queues meanwhile and must not reach the upstream before the fallback is done.
func TestInterceptRoutesRunUnderTheLock(t *testing.T) {
	servers := redistest.StartN(t, 3)
	wl := newWorkLog()
	up := serveOn(t, func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Req-Id")
		what := "work"
		if r.Header.Get("X-Fallback") != "" {
			what = "fallback work"
		}
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
	if ov := wl.overlaps(); len(ov) > 0 {
		t.Errorf("two requests of key \"res\" worked in the upstream at once:\n%s\nwork:\n%s", strings.Join(ov, "\n"), wl)
	}
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
		id := r.Header.Get("X-Req-Id")
		what := "work"
		if r.Header.Get("X-Again") != "" {
			what = "handle_errors work"
		}
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
	if ov := wl.overlaps(); len(ov) > 0 {
		t.Errorf("two requests of key \"res\" worked in the upstream at once:\n%s\nwork:\n%s", strings.Join(ov, "\n"), wl)
	}
}
