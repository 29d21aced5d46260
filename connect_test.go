package caddyredlock

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// These tests run Caddy against real Redis deployments: TLS with a private CA, mutual
// TLS, a server name for nodes addressed by IP, unix sockets, and the docs'
// least-privilege ACL user; and misconfigured ones, which must fail fast and say why.

// everyFeature drives one Caddy site through the features on urls: a streamed request
// holds /doc past its ttl (renewals), a second one waits and gets it after (release
// notice), fencing tokens go upstream, the admin API inspects a key, force-releases
// another, and shows every node up without errors.
func everyFeature(t *testing.T, servers []*redistest.Server, urls []string, extra string) {
	t.Helper()
	st := &streamer{cancelled: map[string]time.Time{}}
	up := newUpstream(t, 0, st.serve)
	s := adminSite(t, servers, urls, "redlock:", "fencing\n\t\t"+extra, up)
	adm := newAdmClient(s)

	holder := startStream(t, s.url+"/doc?d=2500ms") // ttl 1500ms: renewed while streaming
	var l locksJSON
	if !eventually(10*time.Second, func() bool { l = adm.locks(t); return l.Held == 1 }) {
		t.Fatalf("the streamed request never showed as held: %+v", l)
	}
	var k keyJSON
	adm.json(t, "GET", "/redlock/keys?key=/doc", &k)
	if len(k.Lockers) != 1 || !k.Lockers[0].QuorumHeld || !k.Lockers[0].HeldHere {
		t.Fatalf("inspect /doc: %+v", k)
	}
	waiter := startStream(t, s.url+"/doc?d=0s&w=1")
	if !eventually(10*time.Second, func() bool { l = adm.locks(t); return l.Waiting == 1 }) {
		t.Fatalf("the second request never showed as waiting: %+v", l)
	}
	holder.wait(t, 15*time.Second)
	waiter.wait(t, 15*time.Second)
	for _, r := range []*stream{holder, waiter} {
		if r.err != nil || r.code != http.StatusOK || !strings.HasSuffix(r.body, "done\n") {
			t.Fatalf("request: %d %v %q", r.code, r.err, tail(r.body, 2))
		}
	}

	forced := startStream(t, s.url+"/forced?d=20s")
	if !eventually(10*time.Second, func() bool {
		for _, e := range adm.locks(t).Locks {
			if e.Key == "/forced" && e.State == "held" {
				return true
			}
		}
		return false
	}) {
		t.Fatalf("the forced request never showed as held: %+v", adm.locks(t))
	}
	var r releaseJSON
	adm.json(t, "DELETE", "/redlock/keys?key=/forced", &r)
	// deleted_on may be below the quorum: the aborted holder releases its nodes concurrently.
	if r.Status != "released" || len(r.Lockers) != 1 || !r.Lockers[0].HeldHere {
		t.Fatalf("force release: %+v", r)
	}
	forced.wait(t, 10*time.Second)

	var nodes nodesAnswer
	adm.json(t, "GET", "/redlock/nodes", &nodes)
	if len(nodes.Lockers) != 1 || nodes.Lockers[0].Up != len(urls) {
		t.Fatalf("nodes: %+v", nodes)
	}
	for _, n := range nodes.Lockers[0].Nodes {
		if strings.Contains(n.Address, "@") || strings.Contains(n.Address, "s3cret") {
			t.Errorf("node address shows credentials: %q", n.Address)
		}
	}
	up.mu.Lock()
	tokens := append([]string(nil), up.tokens["/doc"]...)
	up.mu.Unlock()
	if len(tokens) != 2 {
		t.Fatalf("fencing tokens upstream: %v", tokens)
	}
	a, errA := strconv.ParseInt(tokens[0], 10, 64)
	b, errB := strconv.ParseInt(tokens[1], 10, 64)
	if errA != nil || errB != nil || a <= 0 || b <= a {
		t.Errorf("fencing tokens upstream: %v", tokens)
	}
}

func TestCaddyTLSPrivateCA(t *testing.T) {
	skipShort(t)
	pki := redistest.NewPKI(t)
	servers := redistest.StartN(t, 3, redistest.Options{TLS: pki})
	everyFeature(t, servers, redistest.URLs(servers), fmt.Sprintf("tls {\n\t\t\tca %s\n\t\t}", pki.CAFile))
}

// Mutual TLS, nodes addressed by IP with certificates for a DNS name only.
func TestCaddyMutualTLSServerName(t *testing.T) {
	skipShort(t)
	pki := redistest.NewPKI(t, "redis.internal.test")
	servers := redistest.StartN(t, 3, redistest.Options{TLS: pki, TLSAuthClients: true})
	everyFeature(t, servers, redistest.URLs(servers), fmt.Sprintf(
		"tls {\n\t\t\tca %s\n\t\t\tclient_cert %s %s\n\t\t\tserver_name redis.internal.test\n\t\t}",
		pki.CAFile, pki.ClientCertFile, pki.ClientKeyFile))
}

func TestCaddyUnixSockets(t *testing.T) {
	skipShort(t)
	servers := redistest.StartN(t, 3)
	urls := make([]string, len(servers))
	for i, s := range servers {
		urls[i] = s.SocketURL()
	}
	everyFeature(t, servers, urls, "")
}

// Every feature under exactly the ACL line of docs/connecting.md (through a unix socket and TCP).
func TestCaddyDocsACLUser(t *testing.T) {
	skipShort(t)
	servers := redistest.StartN(t, 3)
	args := redistest.DocsACLSetUser(t, "caddy", "s3cret")
	urls := make([]string, len(servers))
	for i, s := range servers {
		if _, err := s.Command(args...); err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		urls[i] = "redis://caddy:s3cret@" + s.Addr()
	}
	urls[0] = "unix://caddy:s3cret@" + strings.TrimPrefix(servers[0].SocketURL(), "unix://")
	everyFeature(t, servers, urls, "")
}

// A misconfigured deployment: requests get 503 quickly, /redlock/nodes names the
// problem on every node, and the log says it at warn.
func misconfiguredSite(t *testing.T, urls []string, extra, want string) {
	t.Helper()
	up := newUpstream(t, 0, nil)
	s := startCaddy(t, "", fmt.Sprintf(`
	redlock {
		redis %s
		node_timeout 200ms
		wait 10s
		%s
	}
%s`, strings.Join(urls, " "), extra, proxyTo(up)))
	adm := newAdmClient(s)
	start := time.Now()
	code, _, _ := get(t, http.DefaultClient, "GET", s.url+"/x", nil)
	if code != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503", code)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("503 took %v", d)
	}
	var nodes nodesAnswer
	if !eventually(10*time.Second, func() bool {
		adm.json(t, "GET", "/redlock/nodes", &nodes)
		if len(nodes.Lockers) != 1 {
			return false
		}
		for _, n := range nodes.Lockers[0].Nodes {
			if n.Up || !strings.Contains(n.LastError, want) {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("nodes: %+v", nodes)
	}
	if !eventually(5*time.Second, func() bool { return s.logContains(`"level":"warn"`, "redis node unusable", want) }) {
		t.Error("problem not logged at warn")
	}
	if hits, _, _ := up.snapshot(); hits != 0 {
		t.Errorf("upstream got %d requests", hits)
	}
}

func TestCaddyTLSWrongCA(t *testing.T) {
	pki, other := redistest.NewPKI(t), redistest.NewPKI(t)
	servers := redistest.StartN(t, 3, redistest.Options{TLS: pki})
	misconfiguredSite(t, redistest.URLs(servers), fmt.Sprintf("tls {\n\t\t\tca %s\n\t\t}", other.CAFile), "not signed by a trusted CA")
}

func TestCaddyTLSNoClientCert(t *testing.T) {
	pki := redistest.NewPKI(t)
	servers := redistest.StartN(t, 3, redistest.Options{TLS: pki, TLSAuthClients: true})
	misconfiguredSite(t, redistest.URLs(servers), fmt.Sprintf("tls {\n\t\t\tca %s\n\t\t}", pki.CAFile), "client certificate")
}

func TestCaddyTLSWrongServerName(t *testing.T) {
	pki := redistest.NewPKI(t, "redis.internal.test")
	servers := redistest.StartN(t, 3, redistest.Options{TLS: pki})
	misconfiguredSite(t, redistest.URLs(servers), fmt.Sprintf("tls {\n\t\t\tca %s\n\t\t\tserver_name other.test\n\t\t}", pki.CAFile), "set tls server_name")
}

func TestCaddyACLMissingPermission(t *testing.T) {
	servers := redistest.StartN(t, 3)
	var args []string
	for _, a := range redistest.DocsACLSetUser(t, "caddy", "s3cret") {
		if a != "+info" {
			args = append(args, a)
		}
	}
	urls := make([]string, len(servers))
	for i, s := range servers {
		if _, err := s.Command(args...); err != nil {
			t.Fatal(err)
		}
		urls[i] = "redis://caddy:s3cret@" + s.Addr()
	}
	misconfiguredSite(t, urls, "", "'info' command")
}

// TestCaddyNodeURLCredentialsNeedScheme: a node URL with credentials but no scheme
// ("default:pw@host:port", "pw@host:port"), in the Caddyfile or through {env.X}, is
// refused (at adapt, or at load with the old config kept), and the password shows in
// none of the adapt error, the /load answer, Caddy's log, the admin routes and /metrics.
func TestCaddyNodeURLCredentialsNeedScheme(t *testing.T) {
	const secret = "Pw-n0t-sh0wn"
	const hint = "redis://user:password@host:port"
	servers := redistest.StartN(t, 1)
	addr := servers[0].Addr()
	up := newUpstream(t, 0, nil)
	body := func(node string) string {
		return fmt.Sprintf("\tredlock {\n\t\tredis %s\n\t\tprefix creds:\n\t}\n%s", node, proxyTo(up))
	}
	s := startCaddy(t, "", body(servers[0].URL()))
	adm := newAdmClient(s)
	shown := map[string]string{} // what a person or a scraper may see, by where
	for i, bad := range []string{"default:" + secret + "@" + addr, secret + "@" + addr} {
		_, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(s.caddyfile("", body(bad))), nil)
		if err == nil || !strings.Contains(err.Error(), hint) {
			t.Errorf("%d: adapting a node URL with credentials and no scheme: %v, want an error that says %s", i, err, hint)
		}
		if err != nil {
			shown[fmt.Sprintf("adapt error %d", i)] = err.Error()
		}
		// Through {env.X}: the Caddyfile adapts (placeholders expand at provision); the
		// load is refused.
		t.Setenv("REDLOCK_TEST_NODE", bad)
		cfg := adapt(t, s.caddyfile("", body("{env.REDLOCK_TEST_NODE}")))
		resp, err := http.Post(s.admin+"/load", "application/json", bytes.NewReader(cfg))
		if err != nil {
			t.Fatalf("POST /load: %v", err)
		}
		answer, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		shown[fmt.Sprintf("/load answer %d", i)] = string(answer)
		if resp.StatusCode == http.StatusOK || !strings.Contains(string(answer), hint) {
			t.Errorf("%d: POST /load with {env.X} = a node URL with credentials and no scheme: %s %s, want refused with %s",
				i, resp.Status, answer, hint)
		}
	}
	// The old config still serves; a request fills the metrics.
	if code, b, _ := get(t, http.DefaultClient, "GET", s.url+"/a", nil); code != http.StatusOK {
		t.Errorf("GET /a after the refused loads: %d %s", code, b)
	}
	for _, route := range []string{"/redlock/nodes", "/redlock/health", "/redlock/locks", "/redlock/keys?key=/a", "/metrics"} {
		_, b, _ := adm.do(t, "GET", route)
		shown[route] = string(b)
	}
	logs, err := os.ReadFile(s.logFile)
	if err != nil {
		t.Fatal(err)
	}
	shown["caddy log"] = string(logs)
	for where, text := range shown {
		if strings.Contains(text, secret) {
			t.Errorf("%s shows the password:\n%s", where, tail(text, 20))
		}
	}
}
