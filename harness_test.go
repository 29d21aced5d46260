package caddyredlock

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	_ "github.com/caddyserver/caddy/v2/modules/caddyhttp/standard"
	_ "github.com/caddyserver/caddy/v2/modules/filestorage"
	_ "github.com/caddyserver/caddy/v2/modules/logging"
	"github.com/redis/go-redis/v9"

	"github.com/caddy-redlock/caddy-redlock/internal/childproc"
	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
	"github.com/caddy-redlock/caddy-redlock/internal/testwait"
	"github.com/caddy-redlock/caddy-redlock/redlock"
)

// The tests run a real Caddy (in this process, one at a time, since Caddy's config is
// process-global: startCaddy; or as cmd/caddy processes for several instances:
// startCaddyProc, with the same Caddyfile), real HTTP, and real redis-server processes.

// caddyBinary builds cmd/caddy once, on first use (the multi-instance, CLI and process
// tests), so that a run of other tests does not pay for the build. With -short it skips
// the test: every test of a cmd/caddy process passes here.
var (
	buildDir   string
	buildOnce  sync.Once
	builtCaddy string
	buildErr   error
)

// caddyBinary is cmd/caddy, built once per test binary; with -short the test is skipped:
// a build of cmd/caddy (15-20 s on a loaded two-core box) and a process per instance
// belong in make test. The request matrix's one short cell calls buildCaddy instead.
func caddyBinary(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs cmd/caddy processes: skipped with -short (make test runs it)")
	}
	return buildCaddy(t)
}

// buildCaddy builds cmd/caddy once per test binary and returns its path.
func buildCaddy(t testing.TB) string {
	t.Helper()
	buildOnce.Do(build)
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtCaddy
}

// build runs the build of cmd/caddy (under buildOnce).
func build() {
	builtCaddy = filepath.Join(buildDir, "caddy")
	cmd := exec.Command("go", "build", "-o", builtCaddy, "./cmd/caddy")
	out, err := cmd.CombinedOutput()
	if err != nil {
		buildErr = fmt.Errorf("building cmd/caddy: %v\n%s", err, out)
	}
}

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	tmp, err := os.MkdirTemp("", "caddy-redlock-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	// Keep Caddy's autosave and storage out of $HOME.
	os.Setenv("XDG_CONFIG_HOME", filepath.Join(tmp, "config"))
	os.Setenv("XDG_DATA_HOME", filepath.Join(tmp, "data"))

	buildDir = tmp
	flag.Parse()
	built := make(chan struct{})
	if testing.Short() && flag.Lookup("test.run").Value.String() == "" {
		// The whole package in the inner loop: build cmd/caddy for the request matrix's
		// short cell while the other tests run, not on the loop's clock.
		go func() {
			defer close(built)
			buildOnce.Do(build)
		}()
	} else {
		close(built)
	}
	code := m.Run()
	<-built
	if code == 0 {
		if leaked := leakedGoroutines(5 * time.Second); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines of this module still running after all tests:\n%s\n", leaked)
			return 1
		}
	}
	return code
}

// leakedGoroutines waits up to timeout for every goroutine running code of this module
// (handler watchers, redlock clients) to end, and returns the stacks of those left.
func leakedGoroutines(timeout time.Duration) string {
	var left []string
	eventually(timeout, func() bool {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		left = left[:0]
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "caddy-redlock/caddy-redlock") && !strings.Contains(g, "leakedGoroutines") &&
				!strings.Contains(g, "testing.(*M)") && !strings.Contains(g, "testing.tRunner") {
				left = append(left, g)
			}
		}
		return len(left) == 0
	})
	return strings.Join(left, "\n\n")
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// adapt turns a Caddyfile into JSON, failing the test on errors.
func adapt(t testing.TB, caddyfile string) []byte {
	t.Helper()
	out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfile), nil)
	if err != nil {
		t.Fatalf("adapting Caddyfile: %v\n%s", err, caddyfile)
	}
	return out
}

// site is one in-process Caddy serving http://127.0.0.1:port with the site body given.
type site struct {
	url      string // http://127.0.0.1:PORT
	admin    string // http://127.0.0.1:PORT of the admin API
	adminAdr string
	port     int
	logFile  string
}

// globalOptions are the test's global Caddyfile options: admin on its own port, logs
// to a file (printed if the test fails), no HTTPS, no autosave.
func (s *site) globalOptions() string {
	return fmt.Sprintf(`{
	admin %s
	persist_config off
	auto_https off
	grace_period 10s
	storage file_system %s
	log {
		output file %s
		level DEBUG
	}
}
`, s.adminAdr, filepath.Join(filepath.Dir(s.logFile), "storage"), s.logFile)
}

// caddyfile wraps a site body into a full Caddyfile for s.
func (s *site) caddyfile(extraGlobal, body string) string {
	g := s.globalOptions()
	if extraGlobal != "" {
		g = strings.Replace(g, "persist_config off", "persist_config off\n\t"+extraGlobal, 1)
	}
	return g + fmt.Sprintf("http://:%d {\n\tbind 127.0.0.1\n%s\n}\n", s.port, body)
}

// startCaddy runs a Caddyfile site body in this process until the test ends.
func startCaddy(t *testing.T, extraGlobal, body string) *site {
	t.Helper()
	return startCaddyPatched(t, extraGlobal, body, nil)
}

// startCaddyPatched is startCaddy with patch applied to the adapted JSON config (for
// what the Caddyfile cannot say, such as an events app subscription).
func startCaddyPatched(t *testing.T, extraGlobal, body string, patch func(cfg map[string]any)) *site {
	t.Helper()
	s := newSite(t)
	cfg := adapt(t, s.caddyfile(extraGlobal, body))
	if patch != nil {
		var m map[string]any
		if err := json.Unmarshal(cfg, &m); err != nil {
			t.Fatal(err)
		}
		patch(m)
		var err error
		if cfg, err = json.Marshal(m); err != nil {
			t.Fatal(err)
		}
	}
	s.load(t, cfg)
	return s
}

// newSite picks a site's ports and files: Caddy serving http://127.0.0.1:port, its admin
// API on another port, its log in the test's directory. Nothing runs yet: load runs it in
// this process, startCaddyProc as a cmd/caddy process.
func newSite(t *testing.T) *site {
	t.Helper()
	s := &site{port: freePort(t), logFile: filepath.Join(t.TempDir(), "caddy.log")}
	s.adminAdr = fmt.Sprintf("localhost:%d", freePort(t))
	s.url = fmt.Sprintf("http://127.0.0.1:%d", s.port)
	s.admin = "http://" + s.adminAdr
	return s
}

// load runs the JSON config cfg in this process until the test ends; a failed test
// shows Caddy's log.
func (s *site) load(t *testing.T, cfg []byte) {
	t.Helper()
	if err := caddy.Load(cfg, true); err != nil {
		t.Fatalf("loading config: %v\n%s", err, cfg)
	}
	t.Cleanup(func() {
		if err := caddy.Stop(); err != nil {
			t.Errorf("stopping caddy: %v", err)
		}
		// Requests still draining keep their lockers open for a ttl after the stop; the
		// admin API of the next test asks every open locker (a force release), and this
		// test's nodes stop next. So the test ends once they are gone (at most 15 s).
		eventually(15*time.Second, func() bool { return len(inflightRequests()) == 0 })
		s.logOnFailure(t)
	})
	waitListening(t, s.port)
}

// logOnFailure shows Caddy's log in a failed test: the warnings and errors, and the last
// lines (REDLOCK_TEST_KEEP_LOGS=dir keeps the whole log).
func (s *site) logOnFailure(t *testing.T) {
	if !t.Failed() {
		return
	}
	b, err := os.ReadFile(s.logFile)
	if err != nil {
		return
	}
	if dir := os.Getenv("REDLOCK_TEST_KEEP_LOGS"); dir != "" {
		_ = os.WriteFile(filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_")+".caddy.log"), b, 0o644)
	}
	t.Logf("caddy log (%s), warnings and errors:\n%s\ncaddy log, last lines:\n%s", s.url, grepLevels(string(b)), tail(string(b), 30))
}

// caddyProc is a site run by a cmd/caddy process (the tests of several instances, of a
// process's exit, its environment or its standard output), with the same Caddyfile as
// an in-process site.
type caddyProc struct {
	*site
	cmd    *exec.Cmd
	exited <-chan struct{} // closed once the process exited and was reaped
	stdout string          // the process's standard output (the console span exporter writes there)
	stderr string          // its standard error (what Caddy prints before its log is set up, a panic)
}

// startCaddyProc runs a Caddyfile site body in a cmd/caddy process, with env added to
// its environment, until the test ends (SIGTERM, then SIGKILL after 15 s).
func startCaddyProc(t *testing.T, body string, env ...string) *caddyProc {
	t.Helper()
	bin := caddyBinary(t) // first: with -short it skips before anything is opened
	dir := t.TempDir()
	p := &caddyProc{site: newSite(t), stdout: filepath.Join(dir, "stdout"), stderr: filepath.Join(dir, "stderr")}
	file := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(file, []byte(p.caddyfile("", body)), 0o600); err != nil {
		t.Fatal(err)
	}
	outf, err := os.Create(p.stdout)
	if err != nil {
		t.Fatal(err)
	}
	errf, err := os.Create(p.stderr)
	if err != nil {
		outf.Close()
		t.Fatal(err)
	}
	p.cmd = exec.Command(bin, "run", "--config", file, "--adapter", "caddyfile")
	p.cmd.Stdout, p.cmd.Stderr = outf, errf
	p.cmd.Env = append(append(os.Environ(), "XDG_CONFIG_HOME="+dir, "XDG_DATA_HOME="+dir), env...)
	exited, err := childproc.Fork(p.cmd, func(error) { // dies with the test binary
		outf.Close()
		errf.Close()
	})
	if err != nil {
		outf.Close()
		errf.Close()
		t.Fatal(err)
	}
	p.exited = exited
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			<-exited
		}
		p.logOnFailure(t)
		if b, _ := os.ReadFile(p.stderr); t.Failed() && len(b) > 0 {
			t.Logf("caddy process %s, standard error:\n%s", p.url, tail(string(b), 40))
		}
	})
	waitListening(t, p.port)
	return p
}

// reload posts a new site body to the admin API (what `caddy reload` does).
func (s *site) reload(t *testing.T, body string) {
	t.Helper()
	cfg := adapt(t, s.caddyfile("", body))
	resp, err := http.Post(s.admin+"/load", "application/json", strings.NewReader(string(cfg)))
	if err != nil {
		t.Errorf("POST /load: %v", err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Errorf("POST /load: %s: %s", resp.Status, b)
	}
}

// logContains reports whether Caddy's log has a line containing all parts.
func (s *site) logContains(parts ...string) bool {
	b, _ := os.ReadFile(s.logFile)
	for _, line := range strings.Split(string(b), "\n") {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(line, p)
		}
		if ok {
			return true
		}
	}
	return false
}

// grepLevels returns the log lines at warn level or above.
func grepLevels(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, `"level":"warn"`) && strings.Contains(l, "HTTP/") && strings.Contains(l, "skipped") {
			continue
		}
		if strings.Contains(l, `"level":"warn"`) || strings.Contains(l, `"level":"error"`) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func tail(s string, lines int) string {
	ls := strings.Split(s, "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.Join(ls, "\n")
}

// waitListening waits until something accepts connections on the loopback port.
func waitListening(t testing.TB, port int) {
	t.Helper()
	var err error
	if !eventually(20*time.Second, func() bool {
		var c net.Conn
		if c, err = net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second); err == nil {
			c.Close()
		}
		return err == nil
	}) {
		t.Fatalf("nothing listens on port %d: %v", port, err)
	}
}

// redisBlock is a redlock block's redis line for the servers.
func redisLine(servers []*redistest.Server) string {
	return "redis " + strings.Join(redistest.URLs(servers), " ")
}

// lockKeysOn lists the lock keys (not fencing counters or channels, which contain a NUL)
// under prefix on every running, unpaused server.
func lockKeysOn(t testing.TB, servers []*redistest.Server, prefix string) []string {
	t.Helper()
	var out []string
	for _, s := range servers {
		if !s.Running() || s.Paused() {
			continue
		}
		c := redis.NewClient(&redis.Options{Addr: s.Addr()})
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		keys, err := c.Keys(ctx, prefix+"*").Result()
		cancel()
		c.Close()
		if err != nil {
			t.Fatalf("KEYS on %s: %v", s.Addr(), err)
		}
		for _, k := range keys {
			if !strings.ContainsRune(k, 0) {
				out = append(out, s.Addr()+" "+k)
			}
		}
	}
	return out
}

// eventually is the tests' one poll helper (internal/testwait, shared with the library's
// tests): it polls cond until it holds or timeout passes, and reports whether it held.
var eventually = testwait.Eventually

// noKeysLeft fails the test if lock keys under prefix remain (releases are bounded by
// node_timeout, so a short wait is enough).
func noKeysLeft(t testing.TB, servers []*redistest.Server, prefix string) {
	t.Helper()
	var left []string
	if !eventually(3*time.Second, func() bool { left = lockKeysOn(t, servers, prefix); return len(left) == 0 }) {
		t.Errorf("lock keys left in Redis: %q", left)
	}
}

// upstream is a real HTTP backend that counts, per lock key (the X-Lock-Key header set
// by Caddy from {http.redlock.key}), how many requests are inside at once.
type upstream struct {
	srv   *http.Server
	addr  string
	delay time.Duration

	mu         sync.Mutex
	inside     map[string]int
	overlaps   int // entries that found another request with the same key inside
	nowInside  int
	maxInside  int // most requests inside at once, any keys
	hits       int
	tokens     map[string][]string // fencing tokens seen, per key, in arrival order
	paths      []string
	keys       []string
	overlapLog []string
	insideIDs  map[string][]string // request ids (X-Req-Id) inside, per key
}

// newUpstream starts an upstream on a free port; handle, if set, serves the request after
// the bookkeeping (default: sleep delay and answer 200).
func newUpstream(t *testing.T, delay time.Duration, handle func(w http.ResponseWriter, r *http.Request)) *upstream {
	t.Helper()
	u := &upstream{delay: delay, inside: map[string]int{}, tokens: map[string][]string{}, insideIDs: map[string][]string{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u.addr = ln.Addr().String()
	u.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("X-Lock-Key")
		u.enter(key, r)
		defer u.leave(key, r)
		if handle != nil {
			handle(w, r)
			return
		}
		select {
		case <-time.After(u.delay):
		case <-r.Context().Done():
			return
		}
		w.Header().Set("X-Seen-Key", key)
		w.Header().Set("X-Seen-Token", r.Header.Get("Redlock-Fencing-Token"))
		io.WriteString(w, "ok "+key)
	})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = u.srv.Serve(ln)
	}()
	t.Cleanup(func() {
		_ = u.srv.Close()
		<-done
	})
	return u
}

func (u *upstream) enter(key string, r *http.Request) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.hits++
	u.inside[key]++
	id := r.Header.Get("X-Req-Id")
	if u.inside[key] > 1 {
		u.overlaps++
		u.overlapLog = append(u.overlapLog, fmt.Sprintf("%s %s %s id=%s entered while %q inside (%d inside)",
			time.Now().Format("15:04:05.000000"), key, r.URL, id, u.insideIDs[key], u.inside[key]))
	}
	u.insideIDs[key] = append(u.insideIDs[key], id)
	u.nowInside++
	u.maxInside = max(u.maxInside, u.nowInside)
	u.tokens[key] = append(u.tokens[key], r.Header.Get("Redlock-Fencing-Token"))
	u.paths = append(u.paths, r.URL.Path)
	u.keys = append(u.keys, key)
}

func (u *upstream) leave(key string, r *http.Request) {
	u.mu.Lock()
	ids := u.insideIDs[key]
	for i, id := range ids {
		if id == r.Header.Get("X-Req-Id") {
			u.insideIDs[key] = append(ids[:i:i], ids[i+1:]...)
			break
		}
	}
	u.inside[key]--
	u.nowInside--
	u.mu.Unlock()
}

// snapshot returns hits, same-key overlaps and the most requests inside at once.
func (u *upstream) snapshot() (hits, overlaps, maxInside int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.hits, u.overlaps, u.maxInside
}

// insideNow is how many requests are inside the upstream now.
func (u *upstream) insideNow() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.nowInside
}

func (u *upstream) seenKeys() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.keys...)
}

// newGate returns a channel and the function that closes it, once; the test's end
// closes it too, so that an upstream handler blocked on it cannot outlive the test.
func newGate(t *testing.T) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(ch) }) }
	t.Cleanup(open)
	return ch, open
}

// proxyTo is the reverse_proxy block every test site uses: it passes the lock key so the
// upstream can count per key.
//
// Responses are not flushed early: a client that has the whole response and closes the
// connection before the handler returns looks like a client that went away mid-request
// (its lock then drains for a ttl). proxyStreaming flushes, for the streaming tests.
func proxyTo(u *upstream) string {
	return fmt.Sprintf(`	reverse_proxy %s {
		header_up X-Lock-Key {http.redlock.key}
	}`, u.addr)
}

func proxyStreaming(u *upstream) string {
	return fmt.Sprintf(`	reverse_proxy %s {
		header_up X-Lock-Key {http.redlock.key}
		flush_interval -1
	}`, u.addr)
}

// get sends one request and returns the status, body and response headers.
func get(t testing.TB, c *http.Client, method, url string, hdr http.Header) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, url, err)
		return 0, "", nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// rawRequest sends a request line as given (clients clean paths; attackers don't) and
// returns the status code.
func rawRequest(t testing.TB, hostport, method, target string, headers ...string) int {
	t.Helper()
	c, err := net.DialTimeout("tcp", hostport, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(15 * time.Second))
	req := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n", method, target, hostport)
	for _, h := range headers {
		req += h + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%s %s: reading response: %v", method, target, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// holdKey takes key with a plain redlock client on the same nodes and prefix (what any
// other Redlock client would do) and returns the function that releases it.
func holdKey(t *testing.T, servers []*redistest.Server, prefix, key string, ttl time.Duration) (release func()) {
	t.Helper()
	c, err := redlock.New(redistest.URLs(servers), redlock.Options{Prefix: prefix, TTL: ttl, NodeTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// A wait: the test's own load may hold the key a moment.
	l, err := c.Acquire(context.Background(), key, redlock.AcquireOptions{Wait: 5 * time.Second})
	if err != nil {
		c.Close()
		t.Fatalf("holding %q: %v", key, err)
	}
	if err := l.KeepAlive(ttl/3, 0); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			_ = l.Release(context.Background())
			_ = c.Close()
		})
	}
	t.Cleanup(release)
	return release
}

func isBusy(err error) bool {
	_, ok := errors.AsType[*redlock.BusyError](err)
	return ok
}

// metricTotal sums a counter's values, or a histogram's sample counts, over the series
// whose labels include want (label name -> value).
func metricTotal(t testing.TB, c prometheus.Collector, want map[string]string) float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 64)
	go func() { c.Collect(ch); close(ch) }()
	total := 0.0
	for m := range ch {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		labels := map[string]string{}
		for _, lp := range pb.GetLabel() {
			labels[lp.GetName()] = lp.GetValue()
		}
		match := true
		for k, v := range want {
			match = match && labels[k] == v
		}
		switch {
		case !match:
		case pb.Counter != nil:
			total += pb.GetCounter().GetValue()
		case pb.Histogram != nil:
			total += float64(pb.GetHistogram().GetSampleCount())
		}
	}
	return total
}

// skipShort skips a multi-second scenario in the quick inner loop (go test -short);
// `make test` and CI run everything.
func skipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("a multi-second scenario: skipped with -short")
	}
}
