package caddyredlock

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
	"github.com/caddy-redlock/caddy-redlock/keys"
)

// Hostile and bad input against a real Caddy: request paths that try to reach one
// resource under a second lock, keys too large for Redis, and Redis nodes that answer
// with errors (WRONGTYPE, OOM, NOSCRIPT, wrong password) or are not Redis at all. Every
// case must end in a clear status (400, 423, 503) and a clear log line, never in a
// request proxied without its lock, and never in a panic. What keys_test.go,
// handler_test.go and keys/normalize_test.go already cover is not repeated here.

// hostileSite runs Caddy with one redlock block over urls in front of a counting
// upstream. opts are extra lines for the redlock block.
func hostileSite(t *testing.T, urls []string, opts string, up *upstream) *site {
	t.Helper()
	return startCaddy(t, "", fmt.Sprintf(`
	redlock {
		redis %s
		prefix hostile:
		ttl 1s
		node_timeout 100ms
		%s
	}
%s`, strings.Join(urls, " "), opts, proxyTo(up)))
}

// wantUnavailable sends one request and checks that it is refused with 503 and
// Retry-After within bound, and that nothing reached the upstream.
func wantUnavailable(t *testing.T, s *site, up *upstream, path string, bound time.Duration) {
	t.Helper()
	before, _, _ := up.snapshot()
	c := &http.Client{Timeout: 10 * time.Second}
	start := time.Now()
	code, body, hdr := get(t, c, "GET", s.url+path, nil)
	took := time.Since(start)
	if code != http.StatusServiceUnavailable {
		t.Errorf("GET %s: %d %q, want 503", path, code, body)
	} else if hdr.Get("Retry-After") == "" {
		t.Errorf("GET %s: 503 without Retry-After", path)
	}
	if took > bound {
		t.Errorf("GET %s took %v, want a quick answer (< %v)", path, took.Round(time.Millisecond), bound)
	}
	if hits, _, _ := up.snapshot(); hits != before {
		t.Errorf("GET %s reached the upstream without a lock", path)
	}
}

func wantOK(t *testing.T, s *site, path string) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	if code, body, _ := get(t, c, "GET", s.url+path, nil); code != http.StatusOK {
		t.Errorf("GET %s: %d %q, want 200", path, code, body)
	}
	// The release follows the response, in the background: let it land before the test
	// changes what the nodes hold.
	if !eventually(5*time.Second, func() bool { return len(inflightRequests()) == 0 }) {
		t.Errorf("GET %s: the lock was not released: %+v", path, inflightRequests())
	}
}

// wantLogged waits until Caddy's log has a line with every part.
func wantLogged(t *testing.T, s *site, parts ...string) {
	t.Helper()
	if !eventually(3*time.Second, func() bool { return s.logContains(parts...) }) {
		t.Errorf("no log line with %q", parts)
	}
}

// noPanic fails the test if Caddy logged a panic.
func noPanic(t *testing.T, s *site) {
	t.Helper()
	if s.logContains("panic") {
		b, _ := os.ReadFile(s.logFile)
		t.Errorf("Caddy logged a panic:\n%s", grepLevels(string(b)))
	}
}

func redisClient(t *testing.T, srv *redistest.Server, password string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), Password: password, Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestHostilePathVariants: spellings of one resource that handler_test.go does not try
// yet (encoded dots, encoded letters with case folding, the absolute request form, an
// encoded trailing slash, a query) all take the held lock; raw control bytes in the
// request line never reach the upstream.
func TestHostilePathVariants(t *testing.T) {
	servers := redistest.StartN(t, 3)
	up := newUpstream(t, 0, nil)
	s := hostileSite(t, redistest.URLs(servers), `wait 100ms
		case_insensitive
		path /Docs/{name}/* doc:{name}`, up)
	hostport := strings.TrimPrefix(s.url, "http://")

	variants := []string{
		"/docs/%2e/readme", "/docs/%2E/readme/", "/docs/x/%2e%2e/readme", "/docs/%2E%2E/docs/readme",
		"/%2e/docs/readme", "/docs/readme/%2e%2e/readme", "/DOCS/%52EADME", "/Docs/ReadMe%2F",
		"/docs/readme?x=1", "/docs%2F%2Freadme", "http://" + hostport + "/docs/readme",
	}
	for _, p := range variants {
		if code := rawRequest(t, hostport, "GET", p); code != 200 {
			t.Errorf("GET %s while free: %d", p, code)
		}
	}
	for _, k := range up.seenKeys() {
		if k != "doc:readme" {
			t.Errorf("a spelling of /docs/readme took key %q", k)
		}
	}
	release := holdKey(t, servers, "hostile:", "doc:readme", 2*time.Second)
	for _, p := range variants {
		if code := rawRequest(t, hostport, "GET", p); code != 423 {
			t.Errorf("GET %s while doc:readme is held: %d, want 423", p, code)
		}
	}
	release()

	// Raw control bytes in the request line: refused before any lock or upstream.
	before, _, _ := up.snapshot()
	for _, target := range []string{"/docs/read\x00me", "/docs/read\tme", "/docs/read\rme", "/docs/\x7freadme"} {
		if code := rawRequestOrClosed(t, hostport, "GET "+target+" HTTP/1.1"); code != 400 && code != 0 {
			t.Errorf("GET %q: %d, want 400 or a closed connection", target, code)
		}
	}
	// A raw newline ends the request line: what follows is garbage, never a second path.
	if code := rawRequestOrClosed(t, hostport, "GET /docs/read\nme HTTP/1.1"); code != 400 && code != 0 {
		t.Errorf("GET with a raw newline: %d", code)
	}
	if hits, _, _ := up.snapshot(); hits != before {
		t.Errorf("a request line with raw control bytes reached the upstream")
	}
	noKeysLeft(t, servers, "hostile:")
	noPanic(t, s)
}

// TestHostilePathPlaceholders: every path-derived placeholder in a key ({path.N}, {dir},
// {file}, {uri}, the original request's {orig_*}, ...) renders from the normalized path,
// so spellings of one resource (//, ./, x/.., a trailing slash or dot, an encoded
// letter) take ONE lock: while another client holds the key, every spelling waits for
// it and none reaches the upstream; once it is free they run one at a time, all with the
// same key. Each row is its own redlock handler, chosen by the X-Row header.
func TestHostilePathPlaceholders(t *testing.T) {
	skipShort(t)
	servers := redistest.StartN(t, 3)
	up := newUpstream(t, 10*time.Millisecond, nil)
	spellings := []string{"/acme/a.txt?v=1", "/./acme/a.txt?v=1", "//acme/a.txt?v=1", "/x/../acme/a.txt?v=1",
		"/acme/a.txt/?v=1", "/acme//a.txt?v=1", "/acme/%61.txt?v=1", "/acme/a.txt/.?v=1"}
	folded := []string{"/ACME/a.txt?v=1", "/./Acme/a.txt?v=1", "//acme/a.txt?v=1", "/x/../aCmE/a.txt?v=1"}
	rows := []struct {
		key, want string
		opts      string   // more lines in the handle block (before redlock) or the redlock block
		spellings []string // default: spellings
	}{
		{key: "{path}", want: "/acme/a.txt"},
		{key: "{path.0}", want: "acme"},
		{key: "{path.1}", want: "a.txt"},
		{key: "{dir}", want: "/acme/"},
		{key: "{file}", want: "a.txt"},
		{key: "{file.base}", want: "a"},
		{key: "{file.ext}", want: ".txt"},
		{key: "{%path}", want: "%2Facme%2Fa.txt"},
		{key: "{uri}", want: "/acme/a.txt?v=1"},
		{key: "{%uri}", want: "%2Facme%2Fa.txt%3Fv%3D1"},
		{key: "{orig_uri}", want: "/acme/a.txt?v=1"},
		{key: "{orig_path}", want: "/acme/a.txt"},
		{key: "{orig_dir}", want: "/acme/"},
		{key: "{orig_file}", want: "a.txt"},
		{key: "{http.request.orig_uri.path.0}", want: "acme"},
		{key: "{http.request.orig_uri.path.file_escaped}", want: "a.txt"},
		// After a rewrite the original path still keys as normalized.
		{key: "{orig_path}|{path}", want: "/acme/a.txt|/static", opts: "rewrite * /static"},
		// Case folding applies to every path placeholder.
		{key: "{path.0}", want: "acme", opts: "case_insensitive", spellings: folded},
	}
	var body strings.Builder
	for i, r := range rows {
		before, inBlock := "", ""
		if strings.HasPrefix(r.opts, "rewrite") {
			before = r.opts
		} else {
			inBlock = r.opts
		}
		fmt.Fprintf(&body, `
	@r%d header X-Row %d
	handle @r%d {
		%s
		redlock {
			redis %s
			prefix pathph:
			ttl 2s
			node_timeout 200ms
			wait 30s
			key r%d:%s
			%s
		}
%s
	}`, i, i, i, before, strings.Join(redistest.URLs(servers), " "), i, r.key, inBlock, proxyTo(up))
	}
	s := startCaddy(t, "", body.String())
	hostport := strings.TrimPrefix(s.url, "http://")

	for i, r := range rows {
		want := fmt.Sprintf("r%d:%s", i, r.want)
		sp := r.spellings
		if sp == nil {
			sp = spellings
		}
		// Held by another client: every spelling waits for this one key.
		release := holdKey(t, servers, "pathph:", want, 30*time.Second)
		hits, _, _ := up.snapshot()
		firstKey := len(up.seenKeys())
		codes := make([]int, len(sp))
		var wg sync.WaitGroup
		for j, target := range sp {
			wg.Go(func() { codes[j] = sendRaw(hostport, target, fmt.Sprintf("X-Row: %d", i)) })
		}
		waiting := func() int {
			n := 0
			for _, e := range inflightRequests() {
				if e.Key == want && e.State == stateWaiting {
					n++
				}
			}
			return n
		}
		eventually(10*time.Second, func() bool {
			now, _, _ := up.snapshot()
			return waiting() == len(sp) || now != hits
		})
		if now, _, _ := up.snapshot(); now != hits || waiting() != len(sp) {
			t.Errorf("key r%d:%s: while %q is held, %d of %d spellings reached the upstream (keys %q), %d wait for it",
				i, r.key, want, now-hits, len(sp), up.seenKeys()[firstKey:], waiting())
		}
		release()
		wg.Wait()
		for j, code := range codes {
			if code != http.StatusOK {
				t.Errorf("key r%d:%s: GET %s: %d", i, r.key, sp[j], code)
			}
		}
		for _, k := range up.seenKeys()[firstKey:] {
			if k != want {
				t.Errorf("key r%d:%s: a spelling took %q, want %q", i, r.key, k, want)
			}
		}
	}
	if _, overlaps, _ := up.snapshot(); overlaps != 0 {
		t.Errorf("%d requests ran while another with the same key was inside:\n%s", overlaps, strings.Join(up.overlapLog, "\n"))
	}
	noKeysLeft(t, servers, "pathph:")
	noPanic(t, s)
}

// sendRaw sends a GET with the request target as given (no client cleans it) and returns
// the status, 0 on any error. Safe to call from any goroutine.
func sendRaw(hostport, target string, headers ...string) int {
	c, err := net.DialTimeout("tcp", hostport, 5*time.Second)
	if err != nil {
		return 0
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	req := "GET " + target + " HTTP/1.1\r\nHost: " + hostport + "\r\nConnection: close\r\n"
	for _, h := range headers {
		req += h + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		return 0
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// rawRequestOrClosed writes line (a whole request line, sent as is) and returns the
// status, or 0 when the server closed the connection without an answer.
func rawRequestOrClosed(t *testing.T, hostport, line string) int {
	t.Helper()
	c, err := net.DialTimeout("tcp", hostport, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, line+"\r\nHost: "+hostport+"\r\nConnection: close\r\n\r\n"); err != nil {
		return 0
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestHostileLongPaths: very long paths and huge header-derived keys are hashed to a
// bounded key in Redis; spellings of one long path share the lock, and two long paths
// that differ only at their end do not.
func TestHostileLongPaths(t *testing.T) {
	servers := redistest.StartN(t, 3)
	gate := make(chan struct{})
	entered := make(chan string, 4)
	up := newUpstream(t, 0, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Block") != "" {
			entered <- r.Header.Get("X-Lock-Key")
			select {
			case <-gate:
			case <-r.Context().Done():
				return
			}
		}
		io.WriteString(w, "ok")
	})
	s := startCaddy(t, "", fmt.Sprintf(`
	handle /t/* {
		redlock {
			%[1]s
			prefix hostile:
			ttl 1s
			node_timeout 100ms
			wait 100ms
			key tenant:{http.request.header.X-Tenant}
		}
	%[2]s
	}
	handle {
		redlock {
			%[1]s
			prefix hostile:
			ttl 1s
			node_timeout 100ms
			wait 100ms
		}
	%[2]s
	}`, redisLine(servers), proxyTo(up)))
	hostport := strings.TrimPrefix(s.url, "http://")

	long := "/files/" + strings.Repeat("segment/", 2000) + "end" // 16 KB
	key := keys.Bound(long)
	if len(key) > 136 {
		t.Fatalf("bounded key of %d bytes", len(key))
	}

	// Held by a request: the key in Redis is the bounded one.
	c := &http.Client{Timeout: 20 * time.Second}
	done := make(chan int, 1)
	go func() {
		code, _, _ := get(t, c, "GET", s.url+long, http.Header{"X-Block": {"1"}})
		done <- code
	}()
	select {
	case k := <-entered:
		if k != key {
			t.Errorf("upstream saw key %q, want %q", k, key)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the long-path request never reached the upstream")
	}
	for _, k := range lockKeysOn(t, servers, "hostile:") {
		if _, name, _ := strings.Cut(k, " "); len(name) > len("hostile:")+136 {
			t.Errorf("lock key of %d bytes in Redis", len(name))
		}
	}
	// Spellings of the same long path wait for it; a path differing only at the end
	// does not.
	for _, p := range []string{"/" + long, long + "/", strings.Replace(long, "/segment/", "/./segment//", 5), long + "/x/.."} {
		if code := rawRequest(t, hostport, "GET", p); code != 423 {
			t.Errorf("a spelling of the held long path (%d bytes): %d, want 423", len(p), code)
		}
	}
	if code := rawRequest(t, hostport, "GET", long[:len(long)-1]+"E"); code != 200 {
		t.Errorf("a different long path with the same prefix: %d, want 200", code)
	}
	close(gate)
	if code := <-done; code != 200 {
		t.Errorf("long-path request: %d", code)
	}

	// Longer request lines than Caddy's header limit are refused (431) before any lock.
	before, _, _ := up.snapshot()
	for _, n := range []int{64 << 10, 2 << 20} {
		if code := rawRequestOrClosed(t, hostport, "GET /"+strings.Repeat("b", n)+" HTTP/1.1"); code != 431 && code != 0 {
			t.Errorf("a %d-byte request line: %d, want 431", n, code)
		}
	}
	if hits, _, _ := up.snapshot(); hits != before {
		t.Error("an oversized request line reached the upstream")
	}

	// A 10 KB header as key: bounded; the same header waits for its holder, another one
	// with the same first 64 bytes does not.
	tenant := strings.Repeat("t", 10<<10)
	release := holdKey(t, servers, "hostile:", keys.Bound("tenant:"+tenant), 2*time.Second)
	if code := rawRequest(t, hostport, "GET", "/t/x", "X-Tenant: "+tenant); code != 423 {
		t.Errorf("huge tenant while held: %d, want 423", code)
	}
	if code := rawRequest(t, hostport, "GET", "/t/x", "X-Tenant: "+tenant+"2"); code != 200 {
		t.Errorf("another huge tenant: %d, want 200", code)
	}
	release()
	noKeysLeft(t, servers, "hostile:")
	noPanic(t, s)
}

// TestHostileWrongType: a key of another type at the lock's name is another client's
// lock (Redisson keeps a hash): on a minority the lock still works; on a majority the key
// is busy (423 with Retry-After once the wait runs out), never a node failure. A key of
// another type at the fencing counter's name (ours: nobody else writes it) counts as a
// missing counter and is overwritten: the request gets its lock and a token.
func TestHostileWrongType(t *testing.T) {
	servers := redistest.StartN(t, 3)
	up := newUpstream(t, 0, nil)
	s := hostileSite(t, redistest.URLs(servers), "fencing\n\t\twait 2s", up)
	ctx := context.Background()
	rc := make([]*redis.Client, len(servers))
	for i, srv := range servers {
		rc[i] = redisClient(t, srv, "")
	}

	if err := rc[0].HSet(ctx, "hostile:/w", "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	wantOK(t, s, "/w") // one node of three: still a quorum
	rc[1].HSet(ctx, "hostile:/w", "f", "v")
	before, _, _ := up.snapshot()
	c := &http.Client{Timeout: 10 * time.Second}
	if code, body, hdr := get(t, c, "GET", s.url+"/w", nil); code != 423 || hdr.Get("Retry-After") == "" {
		t.Errorf("GET /w with a foreign hash on 2 of 3 nodes: %d %q (Retry-After %q), want 423", code, body, hdr.Get("Retry-After"))
	}
	if hits, _, _ := up.snapshot(); hits != before {
		t.Error("GET /w reached the upstream while another client held the key")
	}
	rc[0].Del(ctx, "hostile:/w")
	rc[1].Del(ctx, "hostile:/w")
	wantOK(t, s, "/w")

	// The fencing counter is a hash: a missing counter to the script, overwritten.
	for _, c := range rc {
		c.HSet(ctx, "hostile:/f\x00fence", "f", "v")
	}
	wantOK(t, s, "/f")
	for _, c := range rc {
		if typ := c.Type(ctx, "hostile:/f\x00fence").Val(); typ != "string" {
			t.Errorf("counter left as %s", typ)
		}
	}
	noKeysLeft(t, servers, "hostile:")
	noPanic(t, s)
}

// fillMemory puts 2 MB of data on a node, then lowers its maxmemory to 1 MB: with
// noeviction every write is refused with OOM from then on. (Filling up to a limit is
// not stable: client buffers shrink and writes pass again.)
func fillMemory(t *testing.T, c *redis.Client) {
	t.Helper()
	ctx := context.Background()
	for i := range 32 {
		if err := c.Set(ctx, "fill:"+strconv.Itoa(i), strings.Repeat("x", 64<<10), 0).Err(); err != nil {
			t.Fatalf("filling memory: %v", err)
		}
	}
	if err := c.ConfigSet(ctx, "maxmemory", "1mb").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, "probe", "x", 0).Err(); err == nil || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("a write after filling: %v, want OOM", err)
	}
}

// TestHostileOOM: nodes over maxmemory with noeviction refuse the lock scripts with OOM.
// A minority full: requests go on. A majority full: 503 naming OOM, nothing proxied;
// once memory is freed, requests succeed again.
func TestHostileOOM(t *testing.T) {
	servers := redistest.StartN(t, 3, redistest.Options{Args: []string{"--maxmemory-policy", "noeviction"}})
	up := newUpstream(t, 0, nil)
	s := hostileSite(t, redistest.URLs(servers), "fencing", up)
	ctx := context.Background()
	wantOK(t, s, "/m")
	c0, c1 := redisClient(t, servers[0], ""), redisClient(t, servers[1], "")
	fillMemory(t, c0)
	wantOK(t, s, "/m")
	fillMemory(t, c1)
	wantUnavailable(t, s, up, "/m", 2*time.Second)
	wantLogged(t, s, `\"/m\"`, "OOM")
	// Free the memory without losing the lock state: a FLUSHALL would be a data loss the
	// nodes are quarantined for (TestFlushedNodeDoesNotVote).
	for _, c := range []*redis.Client{c0, c1} {
		for i := range 32 {
			if err := c.Del(ctx, "fill:"+strconv.Itoa(i)).Err(); err != nil {
				t.Fatal(err)
			}
		}
		c.ConfigSet(ctx, "maxmemory", "0")
	}
	wantOK(t, s, "/m")
	noKeysLeft(t, servers, "hostile:")
	noPanic(t, s)
}

// TestHostileScriptFlush: SCRIPT FLUSH on every node, between requests and while a
// stream renews its lock, is recovered from transparently (EVALSHA falls back to EVAL):
// the stream keeps its lock to the end and nothing is left behind.
func TestHostileScriptFlush(t *testing.T) {
	skipShort(t)
	servers := redistest.StartN(t, 3)
	st := &streamer{cancelled: map[string]time.Time{}}
	up := newUpstream(t, 0, st.serve)
	s := startCaddy(t, "", fmt.Sprintf(`
	redlock {
		%s
		prefix hostile:
		ttl 1s
		node_timeout 100ms
		fencing
	}
%s`, redisLine(servers), proxyStreaming(up)))
	ctx := context.Background()
	flush := func() {
		for _, srv := range servers {
			if err := redisClient(t, srv, "").ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	c := &http.Client{Timeout: 20 * time.Second}
	if code, _, _ := get(t, c, "GET", s.url+"/n?d=100ms", nil); code != 200 {
		t.Fatalf("first request: %d", code)
	}
	flush()
	if code, _, _ := get(t, c, "GET", s.url+"/n?d=100ms", nil); code != 200 {
		t.Errorf("after SCRIPT FLUSH: %d", code)
	}

	done := make(chan string, 1)
	go func() {
		_, body, _ := get(t, c, "GET", s.url+"/stream?d=3s", nil)
		done <- body
	}()
	// Three flushes, each once the stream renewed since the last: every one of them
	// meets a renewal that must reload the scripts.
	for i := range 3 {
		before := metricTotal(t, metrics.renewals, nil)
		if !eventually(5*time.Second, func() bool { return metricTotal(t, metrics.renewals, nil) > before }) {
			t.Fatalf("no renewal of the stream's lock before flush %d", i+1)
		}
		flush()
	}
	if body := <-done; !strings.HasSuffix(body, "done\n") {
		t.Errorf("stream cut short after SCRIPT FLUSH: ends %q", tail(body, 2))
	}
	if _, ok := st.cancelledAt("/stream"); ok || s.logContains("lock lost") {
		t.Error("the stream lost its lock after SCRIPT FLUSH")
	}
	noKeysLeft(t, servers, "hostile:")
	noPanic(t, s)
}

// TestHostileAuth: a wrong password (or none) on a node makes it fail with a clear error
// that never shows a password; a majority of such nodes gives 503.
func TestHostileAuth(t *testing.T) {
	const pass = "s3cret-pass"
	servers := redistest.StartN(t, 3, redistest.Options{Args: []string{"--requirepass", pass}})
	up := newUpstream(t, 0, nil)
	url := func(i int, pw string) string {
		if pw == "" {
			return "redis://" + servers[i].Addr()
		}
		return "redis://:" + pw + "@" + servers[i].Addr()
	}
	// One wrong password, two right: a quorum.
	s := hostileSite(t, []string{url(0, "wrong-pass"), url(1, pass), url(2, pass)}, "", up)
	wantOK(t, s, "/a")
	// Reload with a majority wrong (one wrong password, one without any).
	s.reload(t, fmt.Sprintf(`
	redlock {
		redis %s %s %s
		prefix hostile:
		ttl 1s
		node_timeout 100ms
	}
%s`, url(0, "wrong-pass"), url(1, ""), url(2, pass), proxyTo(up)))
	wantUnavailable(t, s, up, "/a", 2*time.Second)
	wantLogged(t, s, `\"/a\"`, "WRONGPASS")
	wantLogged(t, s, `\"/a\"`, "NOAUTH")
	for _, secret := range []string{pass, "wrong-pass"} {
		if s.logContains(secret) {
			t.Errorf("Caddy's log shows a password (%q)", secret)
		}
	}
	noPanic(t, s)
}

// notRedis is a TCP listener on loopback that is not a Redis server.
type notRedis struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

// startNotRedis serves each connection with serve until the test ends.
func startNotRedis(t *testing.T, serve func(c net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := &notRedis{ln: ln}
	n.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.mu.Lock()
			n.conns = append(n.conns, c)
			n.mu.Unlock()
			n.wg.Go(func() { serve(c) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		n.mu.Lock()
		for _, c := range n.conns {
			c.Close()
		}
		n.mu.Unlock()
		n.wg.Wait()
	})
	return ln.Addr().String()
}

// TestHostileNotRedis: nodes that are an HTTP server, a TCP server writing garbage, or
// one that accepts and never answers. As a majority they give 503 quickly, with the
// reason logged; as a minority the lock works on the real nodes.
func TestHostileNotRedis(t *testing.T) {
	httpSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello, I am a web server\n")
	}))
	t.Cleanup(httpSrv.Close)
	httpAddr := strings.TrimPrefix(httpSrv.URL, "http://")
	garbage := startNotRedis(t, func(c net.Conn) {
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, "*3\r\n$-7\r\n:notanumber\r\n\x00\xff garbage \x1b[31m\r\n")
		_, _ = io.Copy(io.Discard, c)
	})
	silent := startNotRedis(t, func(c net.Conn) {
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		_, _ = io.Copy(io.Discard, c)
	})

	up := newUpstream(t, 0, nil)
	s := hostileSite(t, []string{httpAddr, garbage, silent}, "wait 1s", up)
	wantUnavailable(t, s, up, "/x", 2*time.Second)
	// The outcome is known after two errors; a node known silent counts as one without
	// being waited for: the message names two of the three, each with why.
	named := 0
	for _, parts := range [][]string{{httpAddr, "HTTP/1.1 400 Bad Request"}, {garbage + ": redis:"}, {silent + ": not answering"}} {
		if s.logContains(append([]string{`\"/x\"`, "fewer than 2 nodes answered"}, parts...)...) {
			named++
		}
	}
	if named < 2 {
		t.Error("the no-quorum error does not name two of the nodes and why")
	}

	servers := redistest.StartN(t, 3)
	s.reload(t, fmt.Sprintf(`
	redlock {
		redis %s %s %s %s %s
		prefix hostile:
		ttl 1s
		node_timeout 100ms
	}
%s`, servers[0].URL(), httpAddr, servers[1].URL(), garbage, servers[2].URL(), proxyTo(up)))
	wantOK(t, s, "/x")
	noKeysLeft(t, servers, "hostile:")
	noPanic(t, s)
}

// TestHostileClientGoneMidStream: a client that goes away in the middle of a streamed
// response, while another request for the same key waits. Caddy's reverse_proxy ends a
// stream cut short by panicking with http.ErrAbortHandler; the upstream, which does not
// watch for disconnects, goes on working for a while. The lock must drain for a ttl
// (as for any request cut short) and not pass to the waiter while the upstream still
// runs the old request.
func TestHostileClientGoneMidStream(t *testing.T) {
	servers := redistest.StartN(t, 3)
	// Works 800ms (< ttl) whatever happens, writing a line every 50ms.
	up := newUpstream(t, 0, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		rc := http.NewResponseController(w)
		for i := range 16 {
			fmt.Fprintf(w, "line %d\n", i)
			_ = rc.Flush()
			time.Sleep(50 * time.Millisecond) // its pace: the 800ms of work is the duration under test
		}
	})
	s := startCaddy(t, "", fmt.Sprintf(`
	redlock {
		%s
		prefix hostile:
		ttl 1s
		node_timeout 100ms
		wait 5s
	}
%s`, redisLine(servers), proxyStreaming(up)))

	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", s.url+"/s", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatalf("first line: %v", err)
	}
	waiter := make(chan int, 1)
	go func() {
		code, _, _ := get(t, &http.Client{Timeout: 20 * time.Second}, "GET", s.url+"/s", nil)
		waiter <- code
	}()
	adm := newAdmClient(s)
	if !eventually(10*time.Second, func() bool { return adm.locks(t).Waiting == 1 }) {
		t.Fatal("the second request never waited for the lock")
	}
	cancel()
	resp.Body.Close()
	if code := <-waiter; code != 200 {
		t.Errorf("waiting request: %d", code)
	}
	if hits, overlaps, _ := up.snapshot(); hits != 2 || overlaps != 0 {
		t.Errorf("upstream: %d hits, %d overlaps (want 2 and 0): the lock passed on while the cut stream still ran: %q",
			hits, overlaps, up.overlapLog)
	}
	noKeysLeft(t, servers, "hostile:")
	noPanic(t, s)
}
