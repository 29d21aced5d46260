package caddyredlock

// The Caddy side of the request-lifecycle matrix (matrix_test.go): a cell's cmd/caddy
// process, its admin API, and the clients that talk to it.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/childproc"
)

// reply is what a client saw.
type reply struct {
	status int
	proto  int // HTTP major version, once the response headers came
	body   string
	err    error
	at     time.Time // when the exchange ended for the client
}

func (r reply) complete(static bool) bool {
	if static {
		return r.status == http.StatusOK && r.body == "static ok"
	}
	return r.err == nil && r.status == http.StatusOK && strings.HasSuffix(r.body, "done\n")
}

func (r reply) String() string {
	return fmt.Sprintf("status %d proto %d err %v body %q", r.status, r.proto, r.err, tail(r.body, 3))
}

// matrixClient is a client that opens a connection per request: an HTTP/1.1 one, or
// HTTP/2 over cleartext (h2c, prior knowledge).
func matrixClient(h2 bool) *http.Client {
	tr := &http.Transport{DisableKeepAlives: true}
	if h2 {
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetUnencryptedHTTP2(true)
	}
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// roundTrip sends one request and reads the whole response (until ctx is cancelled: the
// client abort and the stream reset).
func roundTrip(ctx context.Context, c *http.Client, method, url string, hdr http.Header) reply {
	var body io.Reader
	if method == "POST" {
		body = bytes.NewReader(bytes.Repeat([]byte("b"), 64<<10))
	}
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return reply{err: err, at: time.Now()}
	}
	req.Header = hdr
	resp, err := c.Do(req)
	if err != nil {
		return reply{err: err, at: time.Now()}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, proto: resp.ProtoMajor, body: string(b), err: err, at: time.Now()}
}

// cellClients sends a cell's requests, each on a connection of its own, to the path
// of the cell's key.
type cellClients struct {
	p   *cellCaddy
	row matrixRow
}

// send starts a request: id is its X-Req-Id, work and first its X-Work and
// X-Work-First. A tunnel request is an Upgrade, reset when abort is closed; the others
// are cut by cancelling ctx, over HTTP/2 (h2c) if h2.
func (c cellClients) send(ctx context.Context, id, work, first string, tunnel, h2 bool, abort <-chan struct{}) <-chan reply {
	hdr := http.Header{"X-Req-Id": {id}, "X-Work": {work}}
	if first != "" {
		hdr.Set("X-Work-First", first)
	}
	out := make(chan reply, 1)
	go func() {
		if tunnel {
			out <- tunnelClient(ctx, c.p.hostport, hdr, abort)
			return
		}
		hc := matrixClient(h2)
		defer hc.CloseIdleConnections()
		out <- roundTrip(ctx, hc, c.row.method, c.p.url+"/res", hdr)
	}()
	return out
}

// follower starts the follower, r2: a plain request of the key.
func (c cellClients) follower(afterReload bool) <-chan reply {
	if !afterReload {
		return c.send(context.Background(), "r2", followerWork, "", false, false, nil)
	}
	// Right after a reload a new connection may be reset unanswered: Caddy's old and
	// new listeners share the port (SO_REUSEPORT), and the kernel resets what is
	// queued on the old one when it closes. Once more, then.
	out := make(chan reply, 1)
	go func() {
		r := <-c.send(context.Background(), "r2", followerWork, "", false, false, nil)
		if r.status == 0 {
			r = <-c.send(context.Background(), "r2", followerWork, "", false, false, nil)
		}
		out <- r
	}()
	return out
}

// cellCaddy is a cell's cmd/caddy process.
type cellCaddy struct {
	url, admin string
	hostport   string
	port       int
	adminPort  int
	grace      string
	log        string
	cmd        *exec.Cmd
	exited     <-chan struct{}
	// patch, if set, changes the adapted JSON config of every load (what a Caddyfile
	// cannot say, such as a subroute's errors routes): the process then runs JSON.
	patch func(cfg map[string]any)
}

// config is the whole config of a load of body, and its content type: the Caddyfile,
// or its JSON adaptation with patch applied.
func (p *cellCaddy) config(t *testing.T, body string) (contentType string, cfg []byte) {
	text := p.caddyfile(body)
	if p.patch == nil {
		return "text/caddyfile", []byte(text)
	}
	var m map[string]any
	if err := json.Unmarshal(adapt(t, text), &m); err != nil {
		t.Fatal(err)
	}
	p.patch(m)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return "application/json", b
}

// caddyfile is a cell's whole Caddyfile: h2c on (the h2reset column), logs to the
// process's output.
func (p *cellCaddy) caddyfile(body string) string {
	return fmt.Sprintf(`{
	admin localhost:%d
	persist_config off
	auto_https off
	grace_period %s
	servers {
		protocols h1 h2c
	}
	log {
		output stderr
		level INFO
	}
}
http://:%d {
	bind 127.0.0.1
%s
}
`, p.adminPort, p.grace, p.port, body)
}

// startCellCaddy runs cmd/caddy with the site body until the test ends (or it exits).
// A port taken meanwhile (another cell, another program) makes it try again on others.
func startCellCaddy(t *testing.T, grace, body string, patch func(cfg map[string]any)) *cellCaddy {
	t.Helper()
	dir := t.TempDir()
	for attempt := 1; ; attempt++ {
		p, err := launchCellCaddy(t, dir, attempt, grace, body, patch)
		if err == nil {
			return p
		}
		if !strings.Contains(err.Error(), "address already in use") || attempt == 3 {
			t.Fatal(err)
		}
	}
}

// launchCellCaddy is one try of startCellCaddy.
func launchCellCaddy(t *testing.T, dir string, attempt int, grace, body string, patch func(cfg map[string]any)) (*cellCaddy, error) {
	p := &cellCaddy{port: matrixPort(t), adminPort: matrixPort(t), grace: grace,
		log: filepath.Join(dir, fmt.Sprintf("caddy-%d.log", attempt)), patch: patch}
	p.hostport = fmt.Sprintf("127.0.0.1:%d", p.port)
	p.url, p.admin = "http://"+p.hostport, fmt.Sprintf("http://localhost:%d", p.adminPort)
	ctype, cfg := p.config(t, body)
	file, adapter := filepath.Join(dir, "Caddyfile"), "caddyfile"
	if ctype == "application/json" {
		file, adapter = filepath.Join(dir, "caddy.json"), "" // JSON: no adapter
	}
	if err := os.WriteFile(file, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"run", "--config", file}
	if adapter != "" {
		args = append(args, "--adapter", adapter)
	}
	p.cmd = exec.Command(buildCaddy(t), args...) // the matrix picks its cells, -short too
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+dir, "XDG_DATA_HOME="+dir)
	exited, err := childproc.Fork(p.cmd, func(error) { logf.Close() }) // dies with the test binary
	if err != nil {
		logf.Close()
		t.Fatal(err)
	}
	p.exited = exited
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			b, _ := os.ReadFile(p.log)
			if dir := os.Getenv("REDLOCK_TEST_KEEP_LOGS"); dir != "" {
				_ = os.WriteFile(filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_")+".caddy.log"), b, 0o644)
			}
			t.Logf("caddy (%v) log, warnings and errors:\n%s\ncaddy log, last lines:\n%s", p.cmd.ProcessState, grepLevels(string(b)), tail(string(b), 15))
		}
	})
	// Up when its own admin API answers (its config names its port) and its port
	// accepts connections.
	ours := fmt.Sprintf(":%d", p.port)
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case <-p.exited:
			b, _ := os.ReadFile(p.log)
			return nil, fmt.Errorf("caddy exited at start:\n%s", b)
		default:
		}
		if cfg, err := p.adminGet("/config/apps/http/servers"); err == nil && strings.Contains(cfg, ours) {
			if c, err := net.DialTimeout("tcp", p.hostport, time.Second); err == nil {
				c.Close()
				return p, nil
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("caddy never came up")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// matrixPort returns a loopback port that was free a moment ago, from below the
// kernel's ephemeral range (32768 and up here): ports the kernel hands to every
// outgoing connection and to every listener on port 0 are taken again too often while
// cells start side by side. A port is given out once per test binary.
func matrixPort(t *testing.T) int {
	t.Helper()
	matrixPorts.Lock()
	defer matrixPorts.Unlock()
	for range 200 {
		port := 10000 + mrand.IntN(22000)
		if matrixPorts.used[port] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		l.Close()
		matrixPorts.used[port] = true
		return port
	}
	t.Fatal("no free port below the ephemeral range")
	return 0
}

var matrixPorts = struct {
	sync.Mutex
	used map[int]bool
}{used: map[int]bool{}}

// adminGet returns an admin API answer's body.
func (p *cellCaddy) adminGet(path string) (string, error) {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(p.admin + path)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return string(b), err
}

// adminDo calls the admin API; any answer but 200 is an error.
func (p *cellCaddy) adminDo(method, path, contentType, body string) error {
	req, err := http.NewRequest(method, p.admin+path, strings.NewReader(body))
	if err != nil {
		return err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	c := &http.Client{Timeout: 20 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, b)
	}
	return nil
}

// locksLost is caddy_redlock_locks_lost_total, summed, from the admin API's metrics.
func (p *cellCaddy) locksLost() float64 {
	metrics, err := p.adminGet("/metrics")
	if err != nil {
		return 0
	}
	var total float64
	for line := range strings.Lines(metrics) {
		if strings.HasPrefix(line, "caddy_redlock_locks_lost_total") {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			total += v
		}
	}
	return total
}

// tunnelClient is the client side of an Upgrade request through Caddy: it reads the
// switched connection's lines until "done", then ends its side cleanly (FIN) and reads
// the end of stream.
func tunnelClient(ctx context.Context, hostport string, hdr http.Header, abort <-chan struct{}) (out reply) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer func() { out.at = time.Now() }()
	c, err := net.DialTimeout("tcp", hostport, 5*time.Second)
	if err != nil {
		out.err = err
		return out
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	defer stop()
	var b strings.Builder
	fmt.Fprintf(&b, "GET /res HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: lines\r\n", hostport)
	for k, v := range hdr {
		fmt.Fprintf(&b, "%s: %s\r\n", k, v[0])
	}
	if _, err := io.WriteString(c, b.String()+"\r\n"); err != nil {
		out.err = err
		return out
	}
	go func() {
		// The client abort: a reset (linger 0), as a browser tab closing does.
		select {
		case <-abort:
			_ = c.(*net.TCPConn).SetLinger(0)
			_ = c.Close()
		case <-ctx.Done():
		}
	}()
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		out.err = err
		return out
	}
	out.status = resp.StatusCode
	if resp.StatusCode != http.StatusSwitchingProtocols {
		body, err := io.ReadAll(resp.Body)
		out.body, out.err = string(body), err
		resp.Body.Close()
		return out
	}
	var body strings.Builder
	for {
		line, err := br.ReadString('\n')
		body.WriteString(line)
		if err != nil {
			out.body, out.err = body.String(), err
			return out
		}
		if line == "done\n" {
			break
		}
	}
	_ = c.(*net.TCPConn).CloseWrite()
	if _, err := br.ReadString('\n'); err != io.EOF {
		out.body, out.err = body.String(), fmt.Errorf("after done and FIN: %v, want EOF", err)
		return out
	}
	out.body, out.status = body.String(), http.StatusOK // a clean session: as complete as a 200
	return out
}
