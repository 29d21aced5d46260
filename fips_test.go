package caddyredlock

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// fipsOnly is the environment of a Go program in FIPS 140-only mode: non-approved
// algorithms (SHA-1 among them) panic.
const fipsOnly = "GODEBUG=fips140=only"

// The cmd/caddy binary starts and serves locked requests in FIPS 140-only mode: `caddy
// version`, and `caddy run` with a fencing redlock block that proxies to an upstream,
// which gets increasing tokens, also after the nodes lost their scripts (SCRIPT FLUSH).
// The plugin once computed SHA-1 at package init (go-redis's NewScript): every binary
// built with it panicked at start in this mode, even `caddy version`.
func TestFIPSOnlyCaddy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	version := exec.CommandContext(ctx, caddyBinary(t), "version")
	version.Env = append(os.Environ(), fipsOnly)
	if out, err := version.CombinedOutput(); err != nil || !strings.HasPrefix(string(out), "v2.") {
		t.Fatalf("caddy version under %s: %v\n%s", fipsOnly, err, out)
	}

	servers := redistest.StartN(t, 3)
	up := newUpstream(t, 0, nil)
	p := startCaddyProc(t, fmt.Sprintf(`
	redlock /locked/* {
		%s
		prefix fips:
		fencing
	}
	handle /locked/* {
%s
	}
	respond "unlocked"`, redisLine(servers), proxyTo(up)), fipsOnly)
	c := &http.Client{Timeout: 10 * time.Second}
	var last int64
	request := func(what string) {
		t.Helper()
		code, body, hdr := get(t, c, "POST", p.url+"/locked/item", nil)
		token, err := strconv.ParseInt(hdr.Get("X-Seen-Token"), 10, 64)
		if code != http.StatusOK || body != "ok /locked/item" || err != nil || token <= last {
			t.Fatalf("%s: %d %q, upstream saw token %q after %d", what, code, body, hdr.Get("X-Seen-Token"), last)
		}
		last = token
	}
	request("first locked request")
	request("second locked request")
	for _, s := range servers {
		if _, err := s.Command("SCRIPT", "FLUSH"); err != nil {
			t.Fatal(err)
		}
	}
	request("locked request after SCRIPT FLUSH")
	if code, body, _ := get(t, c, "GET", p.url+"/other", nil); code != http.StatusOK || body != "unlocked" {
		t.Fatalf("unlocked route: %d %q", code, body)
	}
	noKeysLeft(t, servers, "fips:")
}
