package caddyredlock

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// TestTLSFiles: the tls block's files are read at provision; a missing or bad file is
// refused with the option and the path named.
func TestTLSFiles(t *testing.T) {
	pki := redistest.NewPKI(t)
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.pem")
	if err := os.WriteFile(junk, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	tlsURL := []string{"rediss://127.0.0.1:6380"}
	for _, tc := range []struct {
		name string
		t    TLS
		urls []string
		want string
	}{
		{"missing ca", TLS{CA: []string{pki.CAFile, missing}}, tlsURL, "tls: ca: open " + missing},
		{"junk ca", TLS{CA: []string{junk}}, tlsURL, "tls: ca: " + junk + ": no PEM certificate"},
		{"missing cert", TLS{ClientCert: missing, ClientKey: pki.ClientKeyFile}, tlsURL, "tls: client_cert: open " + missing},
		{"missing key", TLS{ClientCert: pki.ClientCertFile, ClientKey: missing}, tlsURL, "tls: client_cert: open " + missing},
		{"mismatched key", TLS{ClientCert: pki.ClientCertFile, ClientKey: pki.ServerKeyFile}, tlsURL, "tls: client_cert: " + pki.ClientCertFile + " and " + pki.ServerKeyFile},
		{"junk cert", TLS{ClientCert: junk, ClientKey: pki.ClientKeyFile}, tlsURL, "tls: client_cert: " + junk},
		{"no rediss node", TLS{CA: []string{pki.CAFile}}, []string{"redis://127.0.0.1:6379", "unix:///r.sock"}, "tls: set, but no node uses rediss://"},
		{"unknown placeholder", TLS{CA: []string{"{env.REDLOCK_NO_SUCH_VAR}x"}}, tlsURL, "tls: ca: {env.REDLOCK_NO_SUCH_VAR}x: evaluated placeholder"},
	} {
		_, _, err := tc.t.load(tc.urls)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
	good := TLS{CA: []string{pki.CAFile}, ClientCert: pki.ClientCertFile, ClientKey: pki.ClientKeyFile, ServerName: "redis.test"}
	cfg, key, err := good.load(tlsURL)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.RootCAs == nil || len(cfg.Certificates) != 1 || cfg.ServerName != "redis.test" || cfg.InsecureSkipVerify || key == "" {
		t.Errorf("config: %+v, key %q", cfg, key)
	}
	// Another server name, or other file contents, is another fingerprint.
	other := good
	other.ServerName = "other.test"
	if _, k2, _ := other.load(tlsURL); k2 == key {
		t.Error("server_name does not change the locker key")
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.pem"), append(mustRead(t, pki.CAFile), mustRead(t, redistest.NewPKI(t).CAFile)...), 0o600); err != nil {
		t.Fatal(err)
	}
	rotated := good
	rotated.CA = []string{filepath.Join(dir, "ca.pem")}
	if _, k3, _ := rotated.load(tlsURL); k3 == key {
		t.Error("CA contents do not change the locker key")
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestTLSLockers: handlers on the same nodes that differ in TLS settings get lockers of
// their own; handlers with the same settings share one.
func TestTLSLockers(t *testing.T) {
	pki := redistest.NewPKI(t, "redis.test")
	servers := redistest.StartN(t, 1, redistest.Options{TLS: pki})
	url := servers[0].URL()
	open := func(tlsCfg *TLS) *lockerLease {
		h := Handler{Redis: []string{url}, TLS: tlsCfg}
		s, err := h.resolve()
		if err != nil {
			t.Fatal(err)
		}
		if s.lock.TLSConfig, s.tlsKey, err = h.TLS.load(s.urls); err != nil {
			t.Fatal(err)
		}
		l, err := openLocker(s.urls, s)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(l.drop)
		return l
	}
	a := open(&TLS{CA: []string{pki.CAFile}, ServerName: "redis.test"})
	b := open(&TLS{CA: []string{pki.CAFile}, ServerName: "redis.test"})
	c := open(&TLS{CA: []string{pki.CAFile}, InsecureSkipVerify: true})
	if a.pooled != b.pooled {
		t.Error("same TLS settings: two lockers")
	}
	if a.pooled == c.pooled {
		t.Error("different TLS settings share a locker")
	}
	warned := false
	for _, w := range c.pooled.client.Status().Warnings {
		warned = warned || strings.Contains(w, "TLS certificate verification is off")
	}
	if !warned {
		t.Errorf("insecure_skip_verify not warned: %q", c.pooled.client.Status().Warnings)
	}
}

// TestTLSConfigRefusedAtLoad: a config whose CA file is missing does not load, and the
// error names the option and the path.
func TestTLSConfigRefusedAtLoad(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope.pem")
	h, _ := json.Marshal(map[string]any{"handler": "redlock", "redis": []string{"rediss://127.0.0.1:1"},
		"tls": map[string]any{"ca": []string{missing}}})
	cfg := `{"admin":{"disabled":true},"apps":{"http":{"servers":{"s":{"listen":["127.0.0.1:0"],"routes":[{"handle":[` + string(h) + `]}]}}}}}`
	err := caddy.Load([]byte(cfg), true)
	if err == nil {
		_ = caddy.Stop()
		t.Fatal("config with a missing CA file loaded")
	}
	if !strings.Contains(err.Error(), "tls: ca: open "+missing) {
		t.Errorf("error %v does not name the option and the path", err)
	}
}
