package redlock

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
	"go.uber.org/zap"
	"go.uber.org/zap/exp/zapslog"
	"go.uber.org/zap/zaptest/observer"
)

// misconfigured starts a client on urls and checks that a deployment problem is
// reported clearly: an acquire fails fast (no hang, no retry loop) with an
// *UnavailableError carrying want, every node's last_error says wantNode (want if
// empty), and the problem is logged at warn once per node.
func misconfigured(t *testing.T, urls []string, opt Options, acquire AcquireOptions, want, wantNode string) {
	t.Helper()
	core, logs := observer.New(zap.WarnLevel)
	opt.Logger = slog.New(zapslog.NewHandler(core))
	c, err := New(urls, opt)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer closeForGood(c)
	acquire.Wait = 5 * time.Second
	start := time.Now()
	_, err = c.Acquire(context.Background(), "k", acquire)
	if !isUnavailable(err) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Acquire error = %v, want unavailable with %q", err, want)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Acquire took %v to fail", d)
	}
	if wantNode == "" {
		wantNode = want
	}
	want = wantNode
	if !eventually(3*time.Second, func() bool {
		for _, s := range c.Status().Nodes {
			if s.Up || !strings.Contains(s.LastError, want) {
				return false
			}
		}
		// Every one of these is the operator's to fix, and says so by its type.
		for _, s := range c.Status().Nodes {
			if ce, ok := errors.AsType[*ConfigError](s.LastErr); !ok || ce.Kind == "" || ce.Hint == "" {
				t.Fatalf("node %s: last error %v is no *ConfigError with a kind", s.Address, s.LastErr)
			}
		}
		return logs.FilterMessage("redis node unusable").FilterFieldKey("node").Len() >= len(urls)
	}) {
		t.Fatal("timed out waiting for: last_error and log on every node")
	}
	waitChecks(t, c, 3) // more failed checks: still one line per node
	if n := logs.FilterMessage("redis node unusable").Len(); n != len(urls) {
		t.Errorf("logged %d times, want once per node (%d): %v", n, len(urls), logs.All())
	}
	for _, e := range logs.FilterMessage("redis node unusable").All() {
		if !strings.Contains(e.ContextMap()["error"].(string), want) {
			t.Errorf("log entry %v lacks %q", e.ContextMap(), want)
		}
	}
}

func TestTLSWrongCA(t *testing.T) {
	pki, other := redistest.NewPKI(t), redistest.NewPKI(t)
	servers := redistest.StartN(t, 3, redistest.Options{TLS: pki})
	opt := fastOptions()
	opt.TLSConfig = &tls.Config{RootCAs: other.Pool}
	misconfigured(t, redistest.URLs(servers), opt, AcquireOptions{}, "not signed by a trusted CA", "")
}

func TestTLSWrongServerName(t *testing.T) {
	pki := redistest.NewPKI(t, "redis.internal.test")
	servers := redistest.StartN(t, 3, redistest.Options{TLS: pki})
	opt := fastOptions()
	opt.TLSConfig = &tls.Config{RootCAs: pki.Pool} // verifies 127.0.0.1: not in the certificate
	misconfigured(t, redistest.URLs(servers), opt, AcquireOptions{}, "set tls server_name", "")
}

func TestTLSClientCertificateRequired(t *testing.T) {
	pki := redistest.NewPKI(t)
	servers := redistest.StartN(t, 3, redistest.Options{TLS: pki, TLSAuthClients: true})
	opt := fastOptions()
	opt.TLSConfig = &tls.Config{RootCAs: pki.Pool}
	misconfigured(t, redistest.URLs(servers), opt, AcquireOptions{}, "client certificate", "")
}

// The docs' ACL line with one permission taken away: the error names what is missing.
func TestACLMissingPermission(t *testing.T) {
	for _, tc := range []struct {
		drop     string
		acquire  AcquireOptions
		want     string
		wantNode string
	}{
		// Restart detection reads INFO on every new connection: nothing works.
		{"+info", AcquireOptions{}, "'info' command", ""},
		// TIME runs inside the acquire script with fencing only.
		{"+time", AcquireOptions{Fencing: true}, "acquire script (it runs GET, PTTL, SET, DEL, TIME, INFO)", "may not run time"},
		{"+evalsha", AcquireOptions{Fencing: true}, "'evalsha' command", ""},
	} {
		t.Run(tc.drop, func(t *testing.T) {
			var args []string
			for _, a := range redistest.DocsACLSetUser(t, "locker", "pw") {
				if a != tc.drop {
					args = append(args, a)
				}
			}
			servers := aclServers(t, 3, args)
			misconfigured(t, userURLs(servers, "locker", "pw"), fastOptions(), tc.acquire, tc.want, tc.wantNode)
		})
	}
}

// Permissions a request does not need at once (TIME without fencing, SUBSCRIBE, a key
// pattern that misses the prefix) are found by the probe: the node shows down with
// the missing command named, and it is logged.
func TestACLProbe(t *testing.T) {
	for _, tc := range []struct {
		name    string
		replace [2]string
		want    string
	}{
		{"no time", [2]string{"+time", "+get"}, "may not run time"},
		{"no subscribe", [2]string{"+subscribe", "+get"}, "'subscribe' command"},
		{"other keys", [2]string{"~redlock:*", "~other:*"}, "grant ~<prefix>* and &<prefix>*"},
		{"other channels", [2]string{"&redlock:*", "&other:*"}, "may not run publish"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var args []string
			for _, a := range redistest.DocsACLSetUser(t, "locker", "pw") {
				if a == tc.replace[0] {
					a = tc.replace[1]
				}
				args = append(args, a)
			}
			servers := aclServers(t, 3, args)
			core, logs := observer.New(zap.WarnLevel)
			opt := fastOptions()
			opt.Logger = slog.New(zapslog.NewHandler(core))
			c, err := New(userURLs(servers, "locker", "pw"), opt)
			if err != nil {
				t.Fatal(err)
			}
			defer closeForGood(c)
			defer func() {
				if t.Failed() {
					t.Logf("nodes: %+v", c.Status().Nodes)
				}
			}()
			if !eventually(3*time.Second, func() bool {
				for _, s := range c.Status().Nodes {
					if s.Up || !strings.Contains(s.LastError, tc.want) {
						return false
					}
				}
				return logs.FilterMessage("redis node unusable").Len() == len(servers)
			}) {
				t.Fatal("timed out waiting for: probe error on every node and logged")
			}
		})
	}
}

// A node that becomes usable again is logged once at info, and shows up.
func TestACLProbeRecovers(t *testing.T) {
	var args []string
	for _, a := range redistest.DocsACLSetUser(t, "locker", "pw") {
		if a != "+time" {
			args = append(args, a)
		}
	}
	servers := aclServers(t, 1, args)
	core, logs := observer.New(zap.InfoLevel)
	opt := fastOptions()
	opt.Logger = slog.New(zapslog.NewHandler(core))
	c, err := New(userURLs(servers, "locker", "pw"), opt)
	if err != nil {
		t.Fatal(err)
	}
	defer closeForGood(c)
	if !eventually(3*time.Second, func() bool { return logs.FilterMessage("redis node unusable").Len() == 1 }) {
		t.Fatal("timed out waiting for: probe fails")
	}
	if _, err := servers[0].Command("ACL", "SETUSER", "locker", "+time"); err != nil {
		t.Fatal(err)
	}
	if !eventually(3*time.Second, func() bool {
		return c.Status().Nodes[0].Up && logs.FilterMessage("redis node usable again").Len() == 1
	}) {
		t.Fatal("timed out waiting for: usable again")
	}
}

// Refused credentials are a configuration problem too: named and logged.
func TestWrongPassword(t *testing.T) {
	servers := aclServers(t, 3, redistest.DocsACLSetUser(t, "locker", "right"))
	misconfigured(t, userURLs(servers, "locker", "wrong"), fastOptions(), AcquireOptions{}, "WRONGPASS", "")
}
