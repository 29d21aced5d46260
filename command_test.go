package caddyredlock

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// The `caddy redlock` tests run the cmd/caddy binary's command against a real Caddy (in
// this process) with real Redis, as an operator would, and keep every output for the
// lock-value check at the end.

// cliRun is one run of `caddy redlock ...`.
type cliRun struct {
	stdout, stderr string
	code           int
}

// cliOutputs keeps every output of the CLI within a test.
type cliOutputs struct {
	mu  sync.Mutex
	all []string
}

func (o *cliOutputs) text() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return strings.Join(o.all, "\n")
}

// cli runs cmd/caddy (caddyBinary) redlock args... and returns its outputs and exit code.
func (o *cliOutputs) cli(t *testing.T, args ...string) cliRun {
	t.Helper()
	bin := caddyBinary(t) // the first call builds it: not on the command's clock
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"redlock"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Dir = t.TempDir() // no adjacent Caddyfile
	err := cmd.Run()
	r := cliRun{stdout: stdout.String(), stderr: stderr.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("caddy redlock %v: %v", args, err)
	}
	o.mu.Lock()
	o.all = append(o.all, r.stdout, r.stderr)
	o.mu.Unlock()
	return r
}

// want fails the test unless the run exited with code and its stdout has every part.
func (r cliRun) want(t *testing.T, code int, parts ...string) {
	t.Helper()
	if r.code != code {
		t.Errorf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, code, r.stdout, r.stderr)
	}
	for _, p := range parts {
		if !strings.Contains(r.stdout, p) {
			t.Errorf("output lacks %q:\n%s\nstderr:\n%s", p, r.stdout, r.stderr)
		}
	}
}

// TestCommandLocksNodesKeyRelease: against a Caddy holding one key for a streamed
// request with two requests waiting for it, `locks`, `nodes` and `key` show them as
// tables and as JSON; `release` force-releases the key and aborts the holder. No output
// and no log line holds a lock value.
func TestCommandLocksNodesKeyRelease(t *testing.T) {
	skipShort(t)
	caddyBinary(t) // built before the held request's 20 s stream starts its clock
	servers := redistest.StartN(t, 3)
	st := &streamer{cancelled: map[string]time.Time{}}
	up := newUpstream(t, 0, st.serve)
	s := adminSite(t, servers, redistest.URLs(servers), "cli:", "", up)
	adm := newAdmClient(s)
	clients := nodeClients(t, servers, "")
	var sec secrets
	var out cliOutputs
	addr := "--address=" + s.adminAdr

	holder := startStream(t, s.url+"/doc?d=20s")
	if !eventually(10*time.Second, func() bool { return adm.locks(t).Held == 1 }) {
		t.Fatal("the streamed request never showed as held")
	}
	w1, w2 := startStream(t, s.url+"/doc?d=0s&w=1"), startStream(t, s.url+"/doc?d=0s&w=2")
	if !eventually(10*time.Second, func() bool { l := adm.locks(t); return l.Held == 1 && l.Waiting == 2 }) {
		t.Fatal("want 1 held and 2 waiting")
	}
	sec.collect(t, clients, "cli:/doc")

	r := out.cli(t, "locks", addr)
	r.want(t, 0, "1 held, 2 waiting, 0 draining", "KEY", "STATE", "VALIDITY", "WAITERS", "/doc", "held", "waiting", "GET /doc?d=20s",
		"NAME", "cli: @ "+servers[0].Addr())
	// Columns are aligned: every row starts its STATE column where the header does.
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if col := strings.Index(lines[1], "STATE"); col < 0 || len(lines) != 5 {
		t.Errorf("want a header and 3 rows:\n%s", r.stdout)
	} else {
		for _, l := range lines[2:] {
			if len(l) <= col || l[col-1] != ' ' || l[col] == ' ' {
				t.Errorf("row not aligned with the header (col %d): %q", col, l)
			}
		}
	}
	r = out.cli(t, "locks", "--json", addr)
	r.want(t, 0)
	var lj locksJSON
	if err := json.Unmarshal([]byte(r.stdout), &lj); err != nil || lj.Held != 1 || lj.Waiting != 2 {
		t.Errorf("locks --json: %v %+v", err, lj)
	}

	r = out.cli(t, "nodes", addr)
	r.want(t, 0, "quorum 2", "3 of 3 nodes up", "NODE", "VOTING", "RTT", servers[0].Addr(), servers[2].Addr())
	r = out.cli(t, "nodes", "--json", addr)
	var nj nodesJSON
	if err := json.Unmarshal([]byte(r.stdout), &nj); err != nil || len(nj.Lockers) != 1 || len(nj.Lockers[0].Nodes) != 3 {
		t.Errorf("nodes --json: %v %s", err, r.stdout)
	}

	r = out.cli(t, "key", "/doc", addr)
	r.want(t, 0, "key /doc: held", "a quorum holds it", "2 waiting here", "held here (held) by GET /doc?d=20s", "TTL LEFT")
	r = out.cli(t, "key", "--json", "/doc", addr)
	var kj keyJSON
	if err := json.Unmarshal([]byte(r.stdout), &kj); err != nil || kj.Status != keyHeld || len(kj.Lockers) != 1 || kj.Lockers[0].Waiters != 2 {
		t.Errorf("key --json: %v %s", err, r.stdout)
	}
	sec.collect(t, clients, "cli:/doc")

	r = out.cli(t, "release", "/doc", addr)
	// deleted_on may be below 3: the aborted request's own release can reach a node first.
	r.want(t, 0, "key /doc: released", "cli:/doc deleted on ", "of 3 nodes, 3 answered", "request holding it was aborted")
	holder.wait(t, 10*time.Second)
	if strings.HasSuffix(holder.body, "done\n") {
		t.Errorf("the holder ran to its end after release: %q", tail(holder.body, 1))
	}
	for _, w := range []*stream{w1, w2} {
		w.wait(t, 20*time.Second)
		if w.code != 200 {
			t.Errorf("waiter: %d %v", w.code, w.err)
		}
	}
	r = out.cli(t, "key", "/doc", addr)
	r.want(t, 0, "key /doc: not held")

	if testing.Verbose() {
		t.Logf("what the operator saw:\n%s", out.text())
	}
	noKeysLeft(t, servers, "cli:")
	logs, _ := os.ReadFile(s.logFile)
	sec.check(t, map[string]string{"cli output": out.text(), "caddy log": string(logs), "admin": adm.all()})
}

// TestCommandHealth: `caddy redlock health` and GET /redlock/health say OK (exit 0, 200)
// with every node up, NO QUORUM (exit 1, 503) while a majority of nodes is paused, and
// OK again once they are resumed.
func TestCommandHealth(t *testing.T) {
	servers := redistest.StartN(t, 3)
	up := newUpstream(t, 0, nil)
	s := adminSite(t, servers, redistest.URLs(servers), "clih:", "", up)
	adm := newAdmClient(s)
	var out cliOutputs
	addr := "--address=" + s.adminAdr

	var r cliRun
	if !eventually(15*time.Second, func() bool { r = out.cli(t, "health", addr); return r.code == 0 }) {
		t.Fatalf("health never OK: %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	r.want(t, 0, "OK: every locker has a voting quorum", "clih: @", "ok")
	if code, body, _ := adm.do(t, "GET", "/redlock/health"); code != 200 || !strings.Contains(string(body), `"ok": true`) {
		t.Errorf("GET /redlock/health: %d %s", code, body)
	}

	for _, srv := range servers[:2] {
		if err := srv.Pause(); err != nil {
			t.Fatal(err)
		}
	}
	if !eventually(15*time.Second, func() bool { r = out.cli(t, "health", addr); return r.code == 1 }) {
		t.Fatalf("health never reported the lost quorum: %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	r.want(t, 1, "NO QUORUM", servers[0].Addr()+" (down)", servers[1].Addr()+" (down)")
	if !strings.Contains(r.stderr, "no voting quorum") {
		t.Errorf("stderr does not say why: %s", r.stderr)
	}
	code, body, _ := adm.do(t, "GET", "/redlock/health")
	var hj healthJSON
	if err := json.Unmarshal(body, &hj); err != nil || code != http.StatusServiceUnavailable || hj.OK ||
		len(hj.Lockers) != 1 || hj.Lockers[0].Voting != 1 || hj.Lockers[0].Quorum != 2 || len(hj.Lockers[0].NotVoting) != 2 {
		t.Errorf("GET /redlock/health without quorum: %d %v %s", code, err, body)
	}
	r = out.cli(t, "health", "--json", addr)
	if r.code != 1 || !strings.Contains(r.stdout, `"ok": false`) {
		t.Errorf("health --json without quorum: %d %s", r.code, r.stdout)
	}

	for _, srv := range servers[:2] {
		if err := srv.Resume(); err != nil {
			t.Fatal(err)
		}
	}
	if !eventually(15*time.Second, func() bool { r = out.cli(t, "health", addr); return r.code == 0 }) {
		t.Fatalf("health not OK after resume: %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
}

// TestCommandAdminAddress: the command finds the admin endpoint from a Caddyfile given
// with --config (as `caddy reload` does), reaches a unix socket admin endpoint, and an
// unreachable address gives exit 2 with the address named.
func TestCommandAdminAddress(t *testing.T) {
	servers := redistest.StartN(t, 3)
	up := newUpstream(t, 0, nil)
	// A short directory: unix socket paths are limited to about 100 bytes.
	dir, err := os.MkdirTemp("", "rlcli")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s := newSite(t)
	s.adminAdr, s.admin = "unix/"+filepath.Join(dir, "admin.sock"), ""
	caddyfile := s.caddyfile("", fmt.Sprintf("\tredlock {\n\t\t%s\n\t\tprefix clia:\n\t}\n%s", redisLine(servers), proxyTo(up)))
	s.load(t, adapt(t, caddyfile))
	cfgFile := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(cfgFile, []byte(caddyfile), 0o600); err != nil {
		t.Fatal(err)
	}
	var out cliOutputs

	var r cliRun
	if !eventually(15*time.Second, func() bool { r = out.cli(t, "nodes", "--config", cfgFile); return r.code == 0 }) {
		t.Fatalf("nodes --config: %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	r.want(t, 0, "clia: @", servers[0].Addr())
	r = out.cli(t, "locks", "--config", cfgFile, "--adapter", "caddyfile")
	r.want(t, 0, "0 held, 0 waiting, 0 draining")
	r = out.cli(t, "locks", "--address", s.adminAdr)
	r.want(t, 0, "0 held, 0 waiting")

	unreachable := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	for _, sub := range [][]string{{"locks"}, {"nodes"}, {"key", "/x"}, {"release", "/x"}, {"health"}} {
		r = out.cli(t, append(sub, "--address", unreachable)...)
		if r.code != 2 || !strings.Contains(r.stderr, unreachable) {
			t.Errorf("%v at an unreachable address: exit %d, stderr %q: want 2 and the address named", sub, r.code, r.stderr)
		}
	}
	r = out.cli(t, "key", "--address", s.adminAdr)
	if r.code != 2 || !strings.Contains(r.stderr, "usage") {
		t.Errorf("key without a key: exit %d, stderr %q", r.code, r.stderr)
	}
	r = out.cli(t, "lock", "--address", s.adminAdr)
	if r.code != 2 || !strings.Contains(r.stderr, `unknown command \"lock\"`) {
		t.Errorf("a typo: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestCommandControlCharactersInKeys: a key rendered from a decoded {query.k} holding CR,
// LF, TAB, ESC, DEL, a C1 control and a bidi override shows Go-quoted in the tables of
// every `caddy redlock` subcommand, so none of those bytes reaches the operator's
// terminal and no row is forged; `key` and `release` take the key as `locks` shows it;
// --json is the same JSON with nothing raw for a terminal either. Caddy's log, in the
// JSON and the console encoders, carries the key's CR, LF, TAB and ESC escaped (zap
// encodes fields as JSON strings; DEL and C1 controls it writes as they are).
func TestCommandControlCharactersInKeys(t *testing.T) {
	skipShort(t)
	caddyBinary(t) // built before the held request's stream starts its clock
	servers := redistest.StartN(t, 3)
	st := &streamer{cancelled: map[string]time.Time{}}
	up := newUpstream(t, 0, st.serve)
	consoleLog := filepath.Join(t.TempDir(), "console.log")
	s := startCaddy(t, fmt.Sprintf("log console {\n\t\toutput file %s\n\t\tformat console\n\t\tlevel DEBUG\n\t}", consoleLog), fmt.Sprintf(`
	redlock {
		%s
		prefix ctl:
		ttl 1500ms
		node_timeout 200ms
		wait 30s
		fencing
		key k:{query.k}
	}
	reverse_proxy %s {
		flush_interval -1
	}`, redisLine(servers), up.addr))
	adm := newAdmClient(s)
	var out cliOutputs
	addr := "--address=" + s.adminAdr
	const value = "\r\nforged\trow\x1b[2J\x7f\u009b\u202e"
	key := "k:" + value
	quoted := strconv.Quote(key)

	holder := startStream(t, s.url+"/hold?d=20s&k="+url.QueryEscape(value))
	if !eventually(10*time.Second, func() bool { return adm.locks(t).Held == 1 }) {
		t.Fatal("the streamed request never showed as held")
	}
	safe := func(what string, r cliRun) {
		t.Helper()
		for _, text := range []string{r.stdout, r.stderr} {
			if bad := unsafeForTerminal(strings.ReplaceAll(text, "\t", " ")); bad != "" {
				t.Errorf("%s prints %s raw:\n%q", what, bad, text)
			}
		}
	}
	r := out.cli(t, "locks", addr)
	r.want(t, 0, "1 held, 0 waiting, 0 draining", quoted)
	safe("locks", r)
	if strings.Contains(r.stdout, "\t") || len(strings.Split(strings.TrimSpace(r.stdout), "\n")) != 3 {
		t.Errorf("locks: want a summary, a header and one row:\n%q", r.stdout)
	}
	r = out.cli(t, "locks", "--json", addr)
	safe("locks --json", r)
	var lj locksJSON
	if err := json.Unmarshal([]byte(r.stdout), &lj); err != nil || len(lj.Locks) != 1 || lj.Locks[0].Key != key {
		t.Errorf("locks --json: %v %+v", err, lj)
	}
	for _, cmd := range []string{"nodes", "health"} {
		r = out.cli(t, cmd, addr)
		r.want(t, 0)
		safe(cmd, r)
	}
	r = out.cli(t, "key", quoted, addr)
	r.want(t, 0, "key "+quoted+": held", "held here (held) by GET /hold?")
	safe("key", r)
	r = out.cli(t, "key", "--json", quoted, addr)
	safe("key --json", r)
	var kj keyJSON
	if err := json.Unmarshal([]byte(r.stdout), &kj); err != nil || kj.Key != key || kj.Status != keyHeld {
		t.Errorf("key --json: %v %s", err, r.stdout)
	}
	r = out.cli(t, "release", quoted, addr)
	r.want(t, 0, "key "+quoted+": released", strconv.Quote("ctl:"+key), "request holding it was aborted")
	safe("release", r)
	holder.wait(t, 10*time.Second)
	if strings.HasSuffix(holder.body, "done\n") {
		t.Errorf("the holder ran to its end after release")
	}
	r = out.cli(t, "key", quoted, addr)
	r.want(t, 0, "key "+quoted+": not held")
	if testing.Verbose() {
		t.Logf("what the operator saw:\n%s", out.text())
	}

	// Caddy's log: the key is there (the force release), its CR, LF, TAB and ESC escaped.
	for _, f := range []string{s.logFile, consoleLog} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte("forged")) {
			t.Errorf("%s: the key was never logged", filepath.Base(f))
		}
		// (The console encoder colours levels with escape sequences of its own.)
		for _, c := range []string{"\r", "\x1b[2J", "\nforged", "forged\trow"} {
			if i := bytes.Index(b, []byte(c)); i >= 0 {
				line := b[bytes.LastIndexByte(b[:i], '\n')+1:]
				if j := bytes.IndexByte(line[1:], '\n'); j >= 0 {
					line = line[:j+1]
				}
				t.Errorf("%s has %q raw: %q", filepath.Base(f), c, line)
			}
		}
	}
}
