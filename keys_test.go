package caddyredlock

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/caddy-redlock/caddy-redlock/keys"
)

// renderPath renders the key for a request with the given decoded path.
func renderPath(k *keyer, path string, hdr http.Header) (string, *caddy.Replacer, error) {
	r := httptest.NewRequest("GET", "/", nil)
	r.URL = &url.URL{Path: path}
	for name, v := range hdr {
		r.Header[name] = v
	}
	repl := caddyhttp.NewTestReplacer(r)
	ks, err := k.render(r, repl)
	return strings.Join(ks, " "), repl, err
}

func status(err error) int {
	var he caddyhttp.HandlerError
	if errors.As(err, &he) {
		return he.StatusCode
	}
	return 0
}

func TestRender(t *testing.T) {
	k, err := newKeyer([]PathKey{
		{Path: "/accounts/{id}/*", Key: "acct:{id}"},
		{Path: "/accounts/special", Key: "never"}, // shadowed: first match wins
		{Path: "/t/{x}", Key: "{x}:{http.request.header.X-Tenant}"},
		{Path: "/bad/{x}", Key: "{http.nope.placeholder}"},
		{Path: "/files/*"},
	}, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path, tenant, want string
		status             int
	}{
		{"/accounts/42", "", "acct:42", 0},
		{"/accounts/special", "", "acct:special", 0},
		{"/accounts/42/deposit/x", "", "acct:42", 0},
		// A captured value that looks like a placeholder stays text.
		{"/accounts/{http.request.host}", "", "acct:{http.request.host}", 0},
		{"/t/a", "acme", "a:acme", 0},
		{"/bad/a", "", "", http.StatusInternalServerError},
		{"/files/a/b", "", "/files", 0},
		{"/a\x00b", "", "", http.StatusBadRequest},
		{"/a\nb", "", "", http.StatusBadRequest},
		{"/other", "", "", 0}, // no match, no key: unlocked
	} {
		var hdr http.Header
		if tc.tenant != "" {
			hdr = http.Header{"X-Tenant": {tc.tenant}}
		}
		key, repl, err := renderPath(k, tc.path, hdr)
		switch {
		case tc.status != 0:
			if status(err) != tc.status {
				t.Errorf("%q: got %q, %v; want status %d", tc.path, key, err, tc.status)
			}
		case tc.want == "":
			if !errors.Is(err, errUnlocked) {
				t.Errorf("%q: got %q, %v; want unlocked", tc.path, key, err)
			}
		case err != nil || key != tc.want:
			t.Errorf("%q: got %q, %v; want %q", tc.path, key, err, tc.want)
		}
		if tc.path == "/accounts/42/deposit/x" {
			if v, _ := repl.GetString("http.redlock.param.id"); v != "42" {
				t.Errorf("{http.redlock.param.id} = %q", v)
			}
			if v, _ := repl.GetString("http.redlock.path"); v != "/accounts/42/deposit/x" {
				t.Errorf("{http.redlock.path} = %q", v)
			}
		}
	}

	// Keys stay bounded; a key that renders empty is refused.
	k, _ = newKeyer(nil, []string{"{http.request.header.X-Tenant}"}, false)
	if _, _, err := renderPath(k, "/x", nil); status(err) != http.StatusBadRequest {
		t.Errorf("empty key: %v", err)
	}
	long := strings.Repeat("a", 1000)
	key, _, err := renderPath(k, "/x", http.Header{"X-Tenant": {long}})
	if err != nil || len(key) > 136 || key != keys.Bound(long) {
		t.Errorf("long key: %d bytes, %v", len(key), err)
	}
}

// FuzzRenderKey: rendering never panics, keys stay bounded, and a path and its
// normalized form always take the same key (so no spelling escapes a lock).
func FuzzRenderKey(f *testing.F) {
	for _, s := range []string{"/", "/accounts/42", "//Accounts/./42/../42/x", "/docs/%2F", "/a\x00",
		"/files/" + strings.Repeat("x/", 200), "/\xff", "/t/{x}", "../..//accounts/7"} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, path string, fold bool) {
		k, err := newKeyer([]PathKey{
			{Path: "/Accounts/{id}/*", Key: "acct:{id}"},
			{Path: "/t/{x}"},
		}, []string{"{http.request.uri.path}"}, fold)
		if err != nil {
			t.Fatal(err)
		}
		key, _, err := renderPath(k, path, nil)
		if err != nil {
			if st := status(err); st != http.StatusBadRequest {
				t.Fatalf("%q: unexpected error %v", path, err)
			}
			return
		}
		if key == "" || len(key) > keys.MaxKeyLen {
			t.Fatalf("%q: key %q", path, key)
		}
		norm, err := keys.NormalizePath(path, "", fold)
		if err != nil {
			t.Fatalf("%q rendered but does not normalize: %v", path, err)
		}
		again, _, err := renderPath(k, norm, nil)
		if err != nil || again != key {
			t.Fatalf("%q gives %q but its normal form %q gives %q (%v)", path, key, norm, again, err)
		}
	})
}

// Several keys render in one order whatever the path says (sorted, duplicates merged):
// the order every request takes them in. One rendering empty refuses the request.
func TestRenderSeveralKeys(t *testing.T) {
	k, err := newKeyer([]PathKey{
		{Path: "/transfer/{from}/{to}", Keys: []string{"account:{from}", "account:{to}"}},
		{Path: "/t/{x}", Keys: []string{"{x}", "{http.request.header.X-Tenant}"}},
	}, []string{"z", "a", "z"}, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path, want string
		status     int
	}{
		{"/transfer/b/a", "account:a account:b", 0},
		{"/transfer/a/b", "account:a account:b", 0},
		{"/transfer/a/a", "account:a", 0},
		{"/elsewhere", "a z", 0},
		{"/t/x", "", http.StatusBadRequest}, // the tenant header is missing: that key is empty
	} {
		got, _, err := renderPath(k, tc.path, nil)
		if status(err) != tc.status || got != tc.want {
			t.Errorf("%s: %q (status %d, %v), want %q (status %d)", tc.path, got, status(err), err, tc.want, tc.status)
		}
	}
}
