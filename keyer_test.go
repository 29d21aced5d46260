package caddyredlock

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/caddy-redlock/caddy-redlock/keys"
)

// renderPath renders the key for a request with the given decoded path.
func renderPath(k *keyer, path string, hdr http.Header) (string, *caddy.Replacer, error) {
	ks, repl, err := renderKeys(k, path, hdr)
	return strings.Join(ks, " "), repl, err
}

// renderKeys is renderPath's keys one by one.
func renderKeys(k *keyer, path string, hdr http.Header) ([]string, *caddy.Replacer, error) {
	r := httptest.NewRequest("GET", "/", nil)
	r.URL = &url.URL{Path: path}
	for name, v := range hdr {
		r.Header[name] = v
	}
	repl := caddyhttp.NewTestReplacer(r)
	ks, err := k.render(r, repl)
	return ks, repl, err
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
		"/files/" + strings.Repeat("x/", 200), "/\xff", "/t/{x}", "../..//accounts/7", "/p/a/b.c", "//p/./a/../b.c/", "/P/%2F/x y"} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, path string, fold bool) {
		k, err := newKeyer([]PathKey{
			{Path: "/Accounts/{id}/*", Key: "acct:{id}"},
			{Path: "/t/{x}"},
			{Path: "/p/*", Keys: []string{"{http.request.uri.path.0}/{http.request.uri.path.1}:{http.request.uri.path.dir}" +
				"{http.request.uri.path.file}{http.request.uri.path.file.base}{http.request.uri.path.file.ext}",
				"{http.request.uri}{http.request.uri_escaped}{http.request.uri.path_escaped}",
				"{http.request.orig_uri}{http.request.orig_uri.path.dir}{http.request.orig_uri.path.file_escaped}{http.request.orig_uri.path.2}"}},
		}, []string{"{http.request.uri.path}"}, fold)
		if err != nil {
			t.Fatal(err)
		}
		ks, _, err := renderKeys(k, path, nil)
		if err != nil {
			if st := status(err); st != http.StatusBadRequest {
				t.Fatalf("%q: unexpected error %v", path, err)
			}
			return
		}
		for _, key := range ks { // each key is bounded, not the several joined
			if key == "" || len(key) > keys.MaxKeyLen {
				t.Fatalf("%q: key %q", path, key)
			}
		}
		key := strings.Join(ks, " ")
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

// caddyPathPlaceholders lists the placeholders of Caddy's two path families by reading
// the replacer's source in the module cache (the Caddy this module builds with): every
// string literal that names one. A name ending in "." is a prefix (path segments, query
// parameters).
func caddyPathPlaceholders(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/caddyserver/caddy/v2").Output()
	if err != nil {
		t.Fatalf("finding Caddy's source: %v", err)
	}
	src, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "modules", "caddyhttp", "replacer.go"))
	if err != nil {
		t.Fatalf("reading Caddy's replacer: %v", err)
	}
	names := regexp.MustCompile(`"(http\.request\.(?:orig_)?uri[a-z_.]*)"`).FindAllStringSubmatch(string(src), -1)
	var found []string
	for _, m := range names {
		if !slices.Contains(found, m[1]) {
			found = append(found, m[1])
		}
	}
	if len(found) < 20 {
		t.Fatalf("only %d path placeholders in Caddy's replacer: %q", len(found), found)
	}
	return found
}

// TestPathPlaceholdersAsCaddyOnTheNormalizedPath: every placeholder of Caddy's path
// families is known (none is refused), and each one derived from the path renders in a
// key, for any spelling of a path, exactly what Caddy renders for the normalized path.
func TestPathPlaceholdersAsCaddyOnTheNormalizedPath(t *testing.T) {
	var names []string
	for _, name := range caddyPathPlaceholders(t) {
		switch {
		case strings.HasSuffix(name, ".path."):
			for i := range 4 {
				names = append(names, name+strconv.Itoa(i))
			}
		case strings.HasSuffix(name, ".query."):
			names = append(names, name+"k")
		default:
			names = append(names, name)
		}
	}
	var fromPath int
	for _, name := range names {
		src, err := keys.PathPlaceholder(name)
		if err != nil {
			t.Errorf("Caddy's {%s} is refused: %v", name, err)
		}
		if src != keys.NotFromPath {
			fromPath++
		}
		if q := strings.Contains(name, "query"); q != (src == keys.NotFromPath) {
			t.Errorf("{%s}: source %v", name, src)
		}
	}
	if fromPath < 17 {
		t.Errorf("only %d placeholders derived from the path", fromPath)
	}
	t.Logf("%d placeholders, %d derived from the path", len(names), fromPath)
	// A request with the path target (its original request the same), and Caddy's
	// replacer for it.
	request := func(target string) (*http.Request, *caddy.Replacer) {
		r := httptest.NewRequest("GET", target, nil)
		r = r.WithContext(context.WithValue(r.Context(), caddyhttp.OriginalRequestCtxKey, *r.Clone(r.Context())))
		return r, caddyhttp.NewTestReplacer(r)
	}
	for _, target := range []string{"/acme/a.txt?v=1&w", "//acme/./a.txt/?v=1&w", "/x/../Acme/A.TXT", "/", "/..", "/a%2Fb/c",
		"/d%20e/f.tar.gz?x=%2F", "/acme/%61.txt", "/%E2%82%AC/x.y/", "/a/b/c/d/e", "/;x/y=z,w"} {
		for _, fold := range []bool{false, true} {
			r, repl := request(target)
			norm, err := keys.NormalizePath(r.URL.Path, r.URL.RawPath, fold)
			if err != nil {
				t.Fatal(err)
			}
			_, caddyRepl := request((&url.URL{Path: norm, RawQuery: r.URL.RawQuery}).RequestURI())
			for _, name := range names {
				k, err := newKeyer(nil, []string{"v={" + name + "}"}, fold)
				if err != nil {
					t.Fatal(err)
				}
				keys, err := k.render(r, repl)
				if err != nil {
					t.Fatalf("%s {%s}: %v", target, name, err)
				}
				want, _ := caddyRepl.GetString(name)
				if got := strings.TrimPrefix(keys[0], "v="); got != want {
					t.Errorf("%s (case folding %v) {%s} = %q, Caddy gives %q for the normalized %s", target, fold, name, got, want, norm)
				}
			}
		}
	}
}
