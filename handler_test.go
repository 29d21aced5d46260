package caddyredlock

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// TestBusy: a key held elsewhere (a plain Redlock client, as a background job would)
// makes the request wait, then answers busy_status with Retry-After; nothing reaches the
// upstream, and handle_errors sees the status. The config also uses an explicit global
// `order redlock before reverse_proxy`, which must keep working.
func TestBusy(t *testing.T) {
	servers := redistest.StartN(t, 5)
	up := newUpstream(t, 0, nil)
	s := startCaddy(t, "order redlock before reverse_proxy", fmt.Sprintf(`
	redlock {
		%s
		prefix busy:
		ttl 2s
		node_timeout 200ms
		wait 300ms
	}
%s
	handle_errors {
		respond "redlock said {err.status_code}" {err.status_code}
	}`, redisLine(servers), proxyTo(up)))

	release := holdKey(t, servers, "busy:", "/res", 2*time.Second)
	c := &http.Client{Timeout: 10 * time.Second}
	code, body, hdr := get(t, c, "POST", s.url+"/res", nil)
	if code != 423 {
		t.Fatalf("held key: got %d %q, want 423", code, body)
	}
	if ra, err := strconv.Atoi(hdr.Get("Retry-After")); err != nil || ra < 1 {
		t.Errorf("Retry-After = %q, want whole seconds >= 1", hdr.Get("Retry-After"))
	}
	if body != "redlock said 423" {
		t.Errorf("handle_errors body = %q", body)
	}
	if hits, _, _ := up.snapshot(); hits != 0 {
		t.Errorf("upstream was hit %d times while the key was busy", hits)
	}

	release()
	code, body, _ = get(t, c, "POST", s.url+"/res", nil)
	if code != 200 || body != "ok /res" {
		t.Errorf("after release: got %d %q", code, body)
	}
	noKeysLeft(t, servers, "busy:")
}

// TestUnavailable: with a majority of nodes dead, requests get 503 with Retry-After and
// never reach the upstream, unless on_unavailable is bypass.
func TestUnavailable(t *testing.T) {
	servers := redistest.StartN(t, 5)
	up := newUpstream(t, 0, nil)
	s := startCaddy(t, "", fmt.Sprintf(`
	redlock /fail/* {
		%[1]s
		prefix un:
		ttl 2s
		node_timeout 200ms
		wait 5s
	}
	redlock /bypass/* {
		%[1]s
		prefix un:
		ttl 2s
		node_timeout 200ms
		on_unavailable bypass
	}
%[2]s`, redisLine(servers), proxyTo(up)))

	c := &http.Client{Timeout: 10 * time.Second}
	if code, body, _ := get(t, c, "GET", s.url+"/fail/x", nil); code != 200 {
		t.Fatalf("all nodes up: got %d %q", code, body)
	}
	for _, srv := range servers[:3] {
		if err := srv.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	before, _, _ := up.snapshot()
	code, body, hdr := get(t, c, "GET", s.url+"/fail/x", nil)
	if code != 503 {
		t.Errorf("no quorum: got %d %q, want 503", code, body)
	}
	if ra, err := strconv.Atoi(hdr.Get("Retry-After")); err != nil || ra < 1 {
		t.Errorf("Retry-After = %q, want whole seconds >= 1", hdr.Get("Retry-After"))
	}
	if hits, _, _ := up.snapshot(); hits != before {
		t.Errorf("upstream was hit without a lock")
	}
	code, body, _ = get(t, c, "GET", s.url+"/bypass/x", nil)
	if code != 200 || body != "ok /bypass/x" {
		t.Errorf("bypass: got %d %q, want 200 from the upstream", code, body)
	}
	if !eventually(2*time.Second, func() bool { return s.logContains("on_unavailable bypass", "/bypass/x") }) {
		t.Errorf("bypass was not logged")
	}
}

// TestKeyNormalization: spellings of one resource take the same lock, so none of them
// gets past a holder of that lock; the key that reaches the upstream is the same.
func TestKeyNormalization(t *testing.T) {
	servers := redistest.StartN(t, 5)
	up := newUpstream(t, 0, nil)
	s := startCaddy(t, "", fmt.Sprintf(`
	redlock {
		%s
		prefix norm:
		ttl 2s
		node_timeout 200ms
		wait 100ms
		case_insensitive
		path /Docs/{name}/* doc:{name}
		key {path}
	}
%s`, redisLine(servers), proxyTo(up)))
	hostport := strings.TrimPrefix(s.url, "http://")

	docs := []string{
		"/docs/readme", "/Docs/README", "//docs//readme", "/docs/./readme/", "/docs/x/../readme",
		"/docs%2Freadme", "/docs/%72eadme", "/DOCS/ReadMe/extra/..", "/./docs/readme/page/..",
		"/../docs/readme",
	}
	others := []string{"/other/Path", "//other/path/", "/other/./path", "/OTHER%2fpath"}

	// Every spelling goes through with the same key while nobody holds it...
	for _, p := range docs {
		if code := rawRequest(t, hostport, "GET", p); code != 200 {
			t.Errorf("GET %s: %d", p, code)
		}
	}
	for _, p := range others {
		if code := rawRequest(t, hostport, "GET", p); code != 200 {
			t.Errorf("GET %s: %d", p, code)
		}
	}
	seen := up.seenKeys()
	want := append(strings.Split(strings.Repeat("doc:readme,", len(docs)), ",")[:len(docs)],
		strings.Split(strings.Repeat("/other/path,", len(others)), ",")[:len(others)]...)
	if strings.Join(seen, " ") != strings.Join(want, " ") {
		t.Errorf("keys at the upstream:\n got %q\nwant %q", seen, want)
	}

	// ...and none gets past a holder of that key.
	release := holdKey(t, servers, "norm:", "doc:readme", 2*time.Second)
	for _, p := range docs {
		if code := rawRequest(t, hostport, "GET", p); code != 423 {
			t.Errorf("GET %s while doc:readme is held: %d, want 423", p, code)
		}
	}
	release()
	release = holdKey(t, servers, "norm:", "/other/path", 2*time.Second)
	for _, p := range others {
		if code := rawRequest(t, hostport, "GET", p); code != 423 {
			t.Errorf("GET %s while /other/path is held: %d, want 423", p, code)
		}
	}
	release()
	noKeysLeft(t, servers, "norm:")
}

// TestBadRequests: a path that cannot be keyed, or a key that renders empty, gets 400 and
// is never proxied unlocked.
func TestBadRequests(t *testing.T) {
	servers := redistest.StartN(t, 5)
	up := newUpstream(t, 0, nil)
	s := startCaddy(t, "", fmt.Sprintf(`
	handle /tenant/* {
		redlock {
			%[1]s
			prefix bad:
			ttl 2s
			node_timeout 200ms
			key tenant:{http.request.header.X-Tenant}
		}
	%[2]s
	}
	handle /empty/* {
		redlock {
			%[1]s
			prefix bad:
			ttl 2s
			node_timeout 200ms
			key {http.request.header.X-Tenant}
		}
	%[2]s
	}
	handle {
		redlock {
			%[1]s
			prefix bad:
			ttl 2s
			node_timeout 200ms
		}
	%[2]s
	}`, redisLine(servers), proxyTo(up)))
	hostport := strings.TrimPrefix(s.url, "http://")

	for _, tc := range []struct {
		target string
		header []string
		want   int
	}{
		{"/a%00b", nil, 400},
		{"/a%0Ab", nil, 400},
		{"/a%0db", nil, 400},
		{"/a%7fb", nil, 400},
		{"/a%ffb", nil, 400}, // not UTF-8
		{"/empty/x", nil, 400},
		{"/empty/x", []string{"X-Tenant: acme"}, 200},
		{"/tenant/x", nil, 200}, // "tenant:" is not empty
	} {
		if code := rawRequest(t, hostport, "GET", tc.target, tc.header...); code != tc.want {
			t.Errorf("GET %s %v: %d, want %d", tc.target, tc.header, code, tc.want)
		}
	}
	if got := strings.Join(up.seenKeys(), " "); got != "acme tenant:" {
		t.Errorf("keys at the upstream: %q", got)
	}
	noKeysLeft(t, servers, "bad:")
}

// TestFencingHeader: the token goes upstream in the header, replaces whatever the client
// sent in it, and grows from request to request.
func TestFencingHeader(t *testing.T) {
	servers := redistest.StartN(t, 5)
	up := newUpstream(t, 0, nil)
	s := startCaddy(t, "", fmt.Sprintf(`
	redlock {
		%s
		prefix fence:
		ttl 2s
		node_timeout 200ms
		fencing
	}
	header >X-Token {http.redlock.token}
%s`, redisLine(servers), proxyTo(up)))

	c := &http.Client{Timeout: 10 * time.Second}
	forged := http.Header{"Redlock-Fencing-Token": {"999999999999999999", "1"}}
	var last int64
	for i := range 3 {
		code, _, hdr := get(t, c, "PUT", s.url+"/doc", forged)
		if code != 200 {
			t.Fatalf("PUT %d: %d", i, code)
		}
		tok, err := strconv.ParseInt(hdr.Get("X-Seen-Token"), 10, 64)
		if err != nil || tok <= 0 || tok == 999999999999999999 {
			t.Fatalf("upstream saw token %q", hdr.Get("X-Seen-Token"))
		}
		if hdr.Get("X-Token") != hdr.Get("X-Seen-Token") {
			t.Errorf("{http.redlock.token} = %q, upstream saw %q", hdr.Get("X-Token"), hdr.Get("X-Seen-Token"))
		}
		if tok <= last {
			t.Errorf("token %d not above the previous %d", tok, last)
		}
		last = tok
	}
	up.mu.Lock()
	for _, tok := range up.tokens["/doc"] {
		if strings.Contains(tok, ",") || tok == "1" {
			t.Errorf("a client-sent token reached the upstream: %q", tok)
		}
	}
	up.mu.Unlock()
}

// TestClientGoesAwayWhileWaiting: a client that disconnects while its request waits for
// the lock stops the wait and leaves nothing locked or queued.
func TestClientGoesAwayWhileWaiting(t *testing.T) {
	servers := redistest.StartN(t, 5)
	up := newUpstream(t, 0, nil)
	s := startCaddy(t, "", fmt.Sprintf(`
	redlock {
		%s
		prefix away:
		ttl 2s
		node_timeout 200ms
		wait 30s
	}
%s`, redisLine(servers), proxyTo(up)))

	release := holdKey(t, servers, "away:", "/k", 2*time.Second)
	cancelledBefore := metricTotal(t, metrics.acquire, map[string]string{"result": resultCancelled})
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		req, _ := http.NewRequestWithContext(ctx, "GET", s.url+"/k", nil)
		_, err := http.DefaultClient.Do(req)
		cancel()
		if err == nil {
			t.Fatal("request returned while the key was held")
		}
	}
	if !eventually(5*time.Second, func() bool { return len(inflightRequests()) == 0 }) {
		t.Errorf("requests still waiting after their clients left: %+v", inflightRequests())
	}
	if n := metricTotal(t, metrics.acquire, map[string]string{"result": resultCancelled}) - cancelledBefore; n != 3 {
		t.Errorf("%d waits ended as cancelled, want 3", int(n))
	}
	release()
	noKeysLeft(t, servers, "away:")
	if hits, _, _ := up.snapshot(); hits != 0 {
		t.Errorf("a request whose client left reached the upstream")
	}
	c := &http.Client{Timeout: 5 * time.Second}
	if code, _, hdr := get(t, c, "GET", s.url+"/k", nil); code != 200 {
		t.Errorf("after release: %d (%v)", code, hdr)
	}
	noKeysLeft(t, servers, "away:")
}

// TestClientGoesAwayWhileHolding: when the client of a request that holds the lock goes
// away, Caddy stops proxying at once, but the upstream may still be working on it (many
// backends don't watch for disconnects). The lock drains for one ttl before it is
// released, so the next request does not overlap the straggler.
func TestClientGoesAwayWhileHolding(t *testing.T) {
	skipShort(t)
	servers := redistest.StartN(t, 5)
	// This upstream ignores cancellation: it works 1.5s whatever happens.
	up := newUpstream(t, 0, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(1500 * time.Millisecond) // its work: the straggler the drain must outlast
		io.WriteString(w, "ok")
	})
	s := startCaddy(t, "", fmt.Sprintf(`
	redlock {
		%s
		prefix drain:
		ttl 2s
		node_timeout 200ms
		wait 20s
	}
%s`, redisLine(servers), proxyTo(up)))

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	req, _ := http.NewRequestWithContext(ctx, "POST", s.url+"/slow", nil)
	if _, err := http.DefaultClient.Do(req); err == nil {
		t.Fatal("the first request should have been cut short by its client")
	}
	cancel()
	if !eventually(2*time.Second, func() bool {
		rs := inflightRequests()
		return len(rs) == 1 && rs[0].State == stateDraining
	}) {
		t.Errorf("the aborted request's lock is not draining: %+v", inflightRequests())
	}
	c := &http.Client{Timeout: 30 * time.Second}
	if code, body, _ := get(t, c, "POST", s.url+"/slow", nil); code != 200 {
		t.Errorf("second request: %d %q", code, body)
	}
	if hits, overlaps, _ := up.snapshot(); hits != 2 || overlaps != 0 {
		t.Errorf("upstream: %d hits, %d overlaps (want 2 and 0): %q", hits, overlaps, up.overlapLog)
	}
	noKeysLeft(t, servers, "drain:")
	if !eventually(3*time.Second, func() bool { return len(inflightRequests()) == 0 }) {
		t.Errorf("in flight: %+v", inflightRequests())
	}
}

// A client that stops reading a streamed response makes reverse_proxy abort with a panic
// (http.ErrAbortHandler), not with a cancelled context. The upstream may still be
// working on the request, so the lock must drain like any cut-short request, not be
// released at once for the next request to overlap the straggler.
func TestClientGoesAwayMidStream(t *testing.T) {
	skipShort(t)
	servers := redistest.StartN(t, 5)
	// Streams one chunk, then works on for 1.5s whatever happens (writes after the
	// client left fail and are ignored).
	up := newUpstream(t, 0, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "first chunk\n")
		w.(http.Flusher).Flush()
		for i := 0; i < 15; i++ {
			time.Sleep(100 * time.Millisecond) // its work, paced: the 1.5s the drain must outlast
			io.WriteString(w, strings.Repeat("x", 32<<10))
			w.(http.Flusher).Flush()
		}
	})
	s := startCaddy(t, "", fmt.Sprintf(`
	redlock {
		%s
		prefix midstream:
		ttl 2s
		node_timeout 200ms
		wait 20s
	}
%s`, redisLine(servers), proxyStreaming(up)))

	conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", s.port))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST /stream HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
	br := bufio.NewReader(conn)
	for { // up to the first chunk of the body
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the response: %v", err)
		}
		if strings.Contains(line, "first chunk") {
			break
		}
	}
	conn.Close() // the client goes away mid-stream; the upstream works on
	if !eventually(3*time.Second, func() bool {
		rs := inflightRequests()
		return len(rs) == 1 && rs[0].State == stateDraining
	}) {
		t.Errorf("the cut-short stream's lock is not draining: %+v", inflightRequests())
	}
	c := &http.Client{Timeout: 30 * time.Second}
	if code, _, _ := get(t, c, "POST", s.url+"/stream", nil); code != 200 {
		t.Errorf("second request: status %d", code)
	}
	if hits, overlaps, _ := up.snapshot(); hits != 2 || overlaps != 0 {
		t.Errorf("upstream: %d hits, %d overlaps (want 2 and 0): %q", hits, overlaps, up.overlapLog)
	}
	noKeysLeft(t, servers, "midstream:")
}

// The release runs after the response has reached the client, not before. Two of three
// nodes are paused while the upstream holds the request, so the release cannot reach a
// quorum and takes a node timeout (1s): the client has its whole response while the
// request is still in the table, releasing, and shown so. (With one node paused the release returns at
// the other two nodes' deletes, about as fast as the response: a race, not a test.)
func TestReleaseIsOffTheResponsePath(t *testing.T) {
	servers := redistest.StartN(t, 3)
	entered := make(chan struct{}, 1)
	proceed := make(chan struct{})
	up := newUpstream(t, 0, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/item" {
			entered <- struct{}{}
			<-proceed
		}
		io.WriteString(w, "ok")
	})
	s := startCaddy(t, "", fmt.Sprintf(`
	redlock {
		%s
		prefix offpath:
		node_timeout 1s
		ttl 10s
	}
%s`, redisLine(servers), proxyTo(up)))
	c := &http.Client{Timeout: 30 * time.Second}
	if code, _, _ := get(t, c, "POST", s.url+"/warm", nil); code != 200 { // connections up
		t.Fatalf("warm-up: status %d", code)
	}
	eventually(5*time.Second, func() bool { return len(inflightRequests()) == 0 })
	type result struct {
		code int
		at   time.Time
	}
	done := make(chan result, 1)
	go func() {
		code, _, _ := get(t, c, "POST", s.url+"/item", nil)
		done <- result{code, time.Now()}
	}()
	<-entered // the lock is held: now take a quorum away from its release
	for _, srv := range servers[1:] {
		if err := srv.Pause(); err != nil {
			t.Fatal(err)
		}
		defer srv.Resume()
	}
	close(proceed)
	res := <-done
	if res.code != 200 {
		t.Fatalf("status %d", res.code)
	}
	if rs := inflightRequests(); len(rs) != 1 || rs[0].State != stateReleasing {
		t.Fatalf("right after the response: %+v, want 1 request still releasing", rs)
	}
	// The admin API says so too (not held: its ServeHTTP is done).
	if v := newAdmClient(s).locks(t); v.Releasing != 1 || v.Held != 0 || len(v.Locks) != 1 || v.Locks[0].State != stateReleasing {
		t.Errorf("GET /redlock/locks while the release runs: %+v, want one releasing lock", v)
	}
	for _, srv := range servers[1:] {
		srv.Resume()
	}
	if !eventually(10*time.Second, func() bool { return len(inflightRequests()) == 0 }) {
		t.Fatalf("the release never finished: %+v", inflightRequests())
	}
}
