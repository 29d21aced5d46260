package caddyredlock

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"math"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
	"github.com/caddy-redlock/caddy-redlock/redlock"
	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

func dur(d time.Duration) caddy.Duration { return caddy.Duration(d) }

func TestCaddyfileEveryOption(t *testing.T) {
	d := caddyfile.NewTestDispenser(`redlock {
		redis redis://10.0.0.1:6379 rediss://user:pw@10.0.0.2:6380/2
		redis 10.0.0.3:6379 unix://u:pw@/run/redis.sock?db=1
		tls {
			ca /ca1.pem /ca2.pem
			client_cert /client.pem /client-key.pem
			server_name redis.internal
			insecure_skip_verify
		}
		path /accounts/{id}/* acct:{id}
		path /docs/{name}
		path /transfer/{from}/{to} acct:{from} acct:{to}
		key {http.request.host}{http.request.uri.path}
		shared get HEAD
		case_insensitive
		prefix app:
		ttl 30s
		renew_interval 5s
		wait 0
		retry_delay 10ms 100ms
		node_timeout 50ms
		drift_factor 0.02
		max_hold 10m
		busy_status 429
		fencing X-Fence
		on_unavailable bypass
		name orders-eu.1
	}`)
	var h Handler
	if err := h.UnmarshalCaddyfile(d); err != nil {
		t.Fatal(err)
	}
	zero := dur(0)
	want := Handler{
		Redis: []string{"redis://10.0.0.1:6379", "rediss://user:pw@10.0.0.2:6380/2", "10.0.0.3:6379", "unix://u:pw@/run/redis.sock?db=1"},
		TLS: &TLS{CA: []string{"/ca1.pem", "/ca2.pem"}, ClientCert: "/client.pem", ClientKey: "/client-key.pem",
			ServerName: "redis.internal", InsecureSkipVerify: true},
		Paths: []PathKey{{Path: "/accounts/{id}/*", Key: "acct:{id}"}, {Path: "/docs/{name}"},
			{Path: "/transfer/{from}/{to}", Keys: []string{"acct:{from}", "acct:{to}"}}},
		Key:             "{http.request.host}{http.request.uri.path}",
		Shared:          []string{"get", "HEAD"},
		CaseInsensitive: true,
		Prefix:          "app:",
		TTL:             dur(30 * time.Second),
		RenewInterval:   dur(5 * time.Second),
		Wait:            &zero,
		RetryDelay:      []caddy.Duration{dur(10 * time.Millisecond), dur(100 * time.Millisecond)},
		NodeTimeout:     dur(50 * time.Millisecond),
		DriftFactor:     0.02,
		MaxHold:         dur(10 * time.Minute),
		BusyStatus:      429,
		Fencing:         true,
		FencingHeader:   "X-Fence",
		OnUnavailable:   "bypass",
		Name:            "orders-eu.1",
	}
	if !reflect.DeepEqual(h, want) {
		t.Errorf("parsed\n%+v\nwant\n%+v", h, want)
	}
	s, err := h.resolve()
	if err != nil {
		t.Fatal(err)
	}
	if s.wait != 0 || s.lock.RetryDelayMin != 10*time.Millisecond || s.lock.RetryDelayMax != 100*time.Millisecond || !s.bypass || s.fencingHeader != "X-Fence" {
		t.Errorf("resolved: %+v", s)
	}
}

// Every option the parser accepts (parseOption, and parseTLS inside the tls block) is in
// UnmarshalCaddyfile's syntax comment and in docs/configuration.md's option tables, and
// neither lists an option the parser refuses.
func TestCaddyfileSyntaxListsEveryOption(t *testing.T) {
	fset := token.NewFileSet()
	parsed := map[string]*ast.File{}
	for _, name := range []string{"caddyfile.go", "tls.go"} {
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		parsed[name] = f
	}
	accepted := append(switchCases(t, parsed["caddyfile.go"], "parseOption"), switchCases(t, parsed["tls.go"], "parseTLS")...)
	slices.Sort(accepted)

	var comment []string
	for _, d := range parsed["caddyfile.go"].Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Name.Name == "UnmarshalCaddyfile" {
			// The block's lines: an option name first, the directive and braces aside.
			for _, line := range strings.Split(fd.Doc.Text(), "\n") {
				if w := strings.Fields(line); len(w) > 0 && regexp.MustCompile(`^[a-z_]+$`).MatchString(w[0]) && w[0] != "redlock" {
					comment = append(comment, w[0])
				}
			}
		}
	}
	slices.Sort(comment)
	if !slices.Equal(comment, accepted) {
		t.Errorf("UnmarshalCaddyfile's syntax comment lists %v; the parser accepts %v", comment, accepted)
	}

	doc, err := os.ReadFile("docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_]+)[ `]").FindAllStringSubmatch(string(doc), -1) {
		if !slices.Contains(documented, m[1]) {
			documented = append(documented, m[1])
		}
	}
	for _, opt := range accepted {
		if !slices.Contains(documented, opt) {
			t.Errorf("option %s is not in a table of docs/configuration.md", opt)
		}
	}
}

// switchCases returns the string cases of the first switch in function fn of f.
func switchCases(t *testing.T, f *ast.File, fn string) []string {
	t.Helper()
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		fd, ok := n.(*ast.FuncDecl)
		if !ok || fd.Name.Name != fn {
			return true
		}
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			if sw, ok := n.(*ast.SwitchStmt); ok && out == nil {
				for _, c := range sw.Body.List {
					for _, e := range c.(*ast.CaseClause).List {
						if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
							v, _ := strconv.Unquote(lit.Value)
							out = append(out, v)
						}
					}
				}
				return false
			}
			return true
		})
		return false
	})
	if len(out) == 0 {
		t.Fatalf("no string cases found in %s", fn)
	}
	return out
}

func TestDefaults(t *testing.T) {
	h := Handler{Redis: []string{"127.0.0.1:6379"}}
	s, err := h.resolve()
	if err != nil {
		t.Fatal(err)
	}
	// The lock's defaults are the redlock package's (Options.Resolve), not copies.
	o := s.lock
	if o.Prefix != "redlock:" || o.TTL != 10*time.Second || o.MaxTTL != 10*time.Second || o.NodeTimeout != 100*time.Millisecond ||
		o.DriftFactor != 0.01 || o.RetryDelayMin != 25*time.Millisecond || o.RetryDelayMax != 250*time.Millisecond {
		t.Errorf("lock defaults %+v", o)
	}
	s.lock = redlock.Options{}
	want := settings{
		urls: []string{"127.0.0.1:6379"}, renew: 10 * time.Second / 3, wait: 5 * time.Second,
		busyStatus: 423, fencingHeader: "Redlock-Fencing-Token", limit: 1,
	}
	if !reflect.DeepEqual(*s, want) {
		t.Errorf("defaults\n%+v\nwant\n%+v", *s, want)
	}
	k, err := newKeyer(nil, nil, false)
	if err != nil || len(k.fallback) != 1 || k.fallback[0] != "{http.redlock.path}" {
		t.Errorf("default key template %q, %v", k.fallback, err)
	}
	// One retry_delay value is both bounds.
	h.RetryDelay = []caddy.Duration{dur(time.Second)}
	if s, err := h.resolve(); err != nil || s.lock.RetryDelayMin != time.Second || s.lock.RetryDelayMax != time.Second {
		t.Errorf("retry_delay 1s: %+v %v", s, err)
	}
}

func TestCaddyfileErrors(t *testing.T) {
	const r = "redis 127.0.0.1:6379\n"
	for _, tc := range []struct{ in, want string }{
		{"redlock", "redis: at least one node URL is required"},
		{"redlock arg {\n" + r + "}", `unexpected argument "arg"`},
		{"redlock {\nredis\n}", "redis: want at least one node URL"},
		{"redlock {\nredis http://x:1\n}", "scheme must be redis, rediss or unix"},
		{"redlock {\nredis unix://\n}", "no socket path"},
		{"redlock {\nredis rediss://:secret@x:1?skip_verify=true\n}", "skip_verify in the URL is not accepted"},
		{"redlock {\n" + r + "tls on {\n}\n}", `tls: unexpected argument "on"`},
		{"redlock {\n" + r + "tls {\nbogus\n}\n}", `tls: unknown option "bogus"`},
		{"redlock {\n" + r + "tls {\nca\n}\n}", "tls: ca: want at least one PEM file"},
		{"redlock {\n" + r + "tls {\nclient_cert a.pem\n}\n}", "tls: client_cert: want <cert-file> <key-file>, got 1"},
		{"redlock {\n" + r + "tls {\nserver_name\n}\n}", "tls: server_name: want exactly one name, got 0"},
		{"redlock {\n" + r + "tls {\nserver_name a b\n}\n}", "tls: server_name: want exactly one name, got 2"},
		{"redlock {\n" + r + "tls {\nserver_name a/b\n}\n}", `tls: server_name: "a/b" is not a host name`},
		{"redlock {\n" + r + "tls {\ninsecure_skip_verify yes\n}\n}", "tls: insecure_skip_verify: takes no argument"},
		{"redlock {\n" + r + "tls {\nca a.pem\nca b.pem\n}\n}", "tls: ca: given more than once"},
		{"redlock {\n" + r + "tls {\n}\ntls {\n}\n}", "tls: given more than once"},
		{"redlock {\nredis localhost\n}", `node 1: redlock: node URL: want redis://host:port`},
		{"redlock {\nredis 127.0.0.1:1 default:secret@127.0.0.1:6379\n}", "node 2: redlock: node URL without a scheme has credentials"},
		{"redlock {\nredis secret@127.0.0.1:6379\n}", "write redis://user:password@host:port"},
		{"redlock {\nredis default:secret\n}", "node 1: redlock: node URL: want redis://host:port"},
		{"redlock {\nredis redis://user:secret@:bad:port\n}", "xxxxx"},
		{"redlock {\n" + r + "bogus 1\n}", `unknown option "bogus"`},
		{"redlock {\n" + r + "drift_factor NaN\n}", `drift_factor: want a number > 0, got "NaN"`},
		{"redlock {\n" + r + "path\n}", "path: want <template> [<key>...], got no argument"},
		{"redlock {\n" + r + "path /a/{x} " + strings.Repeat("k{x} ", 17) + "\n}", "path 1 (/a/{x}): 17 keys, at most 16"},
		{"redlock {\n" + r + "key " + strings.Repeat("k ", 17) + "\n}", "key: 17 keys, at most 16"},
		{"redlock {\n" + r + "key\n}", "key: want <template...>, got no argument"},
		{"redlock {\n" + r + "path /a/{id} a:{id} {nope}\n}", "unknown capture {nope}"},
		{"redlock {\n" + r + "shared\n}", "shared: want the methods that read"},
		{"redlock {\n" + r + "shared GET FOO\n}", `shared: unknown method "FOO"`},
		{"redlock {\n" + r + "limit 0\n}", `limit: want a whole number of holders >= 1, got "0"`},
		{"redlock {\n" + r + "limit -1\n}", `limit: want a whole number of holders >= 1, got "-1"`},
		{"redlock {\n" + r + "limit abc\n}", `limit: want a whole number`},
		{"redlock {\n" + r + "limit 1 2\n}", "limit: want exactly one argument, got 2"},
		{"redlock {\n" + r + "limit 1000\n}", "limit: must be 1 to 64, got 1000"},
		{"redlock {\n" + r + "limit 2\nshared GET\n}", "shared and limit cannot be combined"},
		{"redlock {\n" + r + "path a\n}", `path 1 (a): keys: pattern "a": must start with "/"`},
		{"redlock {\n" + r + "path /a/*/b\n}", `"*" must be the last segment`},
		{"redlock {\n" + r + "path /a/{id} {nope}\n}", "unknown capture {nope}"},
		{"redlock {\n" + r + "path /a/{method}\n}", "Caddyfile placeholder shorthand"},
		{"redlock {\n" + r + "path /a/{x}/{x}\n}", "duplicate capture name"},
		{"redlock {\n" + r + "key {id}\n}", "key: keys: pattern \"/*\": key \"{id}\": unknown capture {id}"},
		{"redlock {\n" + r + "case_insensitive yes\n}", "case_insensitive: takes no argument"},
		{"redlock {\n" + r + "dry_run yes\n}", "dry_run: takes no argument"},
		{"redlock {\n" + r + "prefix\n}", "prefix: want exactly one argument, got 0"},
		{"redlock {\n" + r + "name\n}", "name: want exactly one argument, got 0"},
		{"redlock {\n" + r + "name a b\n}", "name: want exactly one argument, got 2"},
		{"redlock {\n" + r + "name -x\n}", `name: "-x": use letters, digits`},
		{"redlock {\n" + r + "name {http.request.host}\n}", `name: "{http.request.host}": use letters, digits`},
		{"redlock {\n" + r + "name " + strings.Repeat("a", 65) + "\n}", "name: at most 64 characters, got 65"},
		{"redlock {\n" + r + "ttl soon\n}", "ttl: "},
		{"redlock {\n" + r + "ttl -1s\n}", `ttl: negative duration "-1s"`},
		{"redlock {\n" + r + "ttl 1s\nttl 2s\n}", "ttl: given more than once"},
		{"redlock {\n" + r + "ttl 50ms\n}", "node_timeout (100ms) must be smaller than ttl (50ms)"},
		{"redlock {\n" + r + "ttl 102ms\n}", "ttl (102ms) leaves no validity"},
		{"redlock {\n" + r + "renew_interval 10s\n}", "renew_interval: must be > 0 and smaller than ttl (10s), got 10s"},
		{"redlock {\n" + r + "ttl 10s\nmax_ttl 5s\n}", "max_ttl (5s) must be at least ttl (10s)"},
		{"redlock {\n" + r + "renew_interval x\n}", "renew_interval: "},
		{"redlock {\n" + r + "wait -1s\n}", `wait: negative duration`},
		{"redlock {\n" + r + "wait\n}", "wait: want exactly one argument, got 0"},
		{"redlock {\n" + r + "retry_delay\n}", "retry_delay: want <min> [<max>], got 0"},
		{"redlock {\n" + r + "retry_delay 1s 2s 3s\n}", "retry_delay: want <min> [<max>], got 3"},
		{"redlock {\n" + r + "retry_delay 2s 1s\n}", "retry_delay: must satisfy 0 <= min <= max"},
		{"redlock {\n" + r + "retry_delay 0\n}", "retry_delay: max must be > 0"},
		{"redlock {\n" + r + "retry_delay x\n}", "retry_delay: "},
		{"redlock {\n" + r + "node_timeout 0s\nttl 1s\nnode_timeout 2s\n}", "node_timeout: given more than once"},
		{"redlock {\n" + r + "node_timeout fast\n}", "node_timeout: "},
		{"redlock {\n" + r + "drift_factor 0.5\n}", "drift_factor: must be > 0 and < 0.5"},
		{"redlock {\n" + r + "drift_factor 0\n}", "drift_factor: want a number > 0"},
		{"redlock {\n" + r + "drift_factor x\n}", "drift_factor: want a number"},
		{"redlock {\n" + r + "max_hold -5s\n}", "max_hold: negative duration"},
		{"redlock {\n" + r + "busy_status 200\n}", "busy_status: must be a 4xx or 5xx status code"},
		{"redlock {\n" + r + "busy_status abc\n}", "busy_status: want a status code"},
		{"redlock {\n" + r + "fencing a b\n}", "fencing: want at most one header name"},
		{"redlock {\n" + r + "fencing bad:header\n}", `fencing: "bad:header" is not a valid header name`},
		{"redlock {\n" + r + "fencing host\n}", "fencing: header Host cannot carry the token"},
		{"redlock {\n" + r + "on_unavailable maybe\n}", `on_unavailable: must be "fail" or "bypass"`},
		{"redlock {\n" + r + "on_unavailable\n}", "on_unavailable: want exactly one argument"},
	} {
		var h Handler
		err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.in))
		if err == nil {
			t.Errorf("%q: no error, want %q", tc.in, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q:\n got %v\nwant substring %q", tc.in, err, tc.want)
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("%q: error shows a password: %v", tc.in, err)
		}
	}
}

// TestJSONErrors covers what only a JSON config can say wrong; Provision runs the same
// checks (resolve) and prefixes "redlock: ".
func TestJSONErrors(t *testing.T) {
	ok := func() Handler { return Handler{Redis: []string{"127.0.0.1:6379"}} }
	for _, tc := range []struct {
		mod  func(h *Handler)
		want string
	}{
		{func(h *Handler) { h.Redis = nil }, "redis: at least one node URL is required"},
		{func(h *Handler) { h.Redis = []string{""} }, "empty node URL"},
		{func(h *Handler) { h.TTL = -1 }, "ttl: must be > 0"},
		{func(h *Handler) { h.NodeTimeout = -1 }, "node_timeout: must be > 0"},
		{func(h *Handler) { h.DriftFactor = 0.7 }, "drift_factor: must be > 0 and < 0.5"},
		{func(h *Handler) { h.DriftFactor = math.NaN() }, "drift_factor: must be > 0 and < 0.5"},
		{func(h *Handler) { h.RenewInterval = -1 }, "renew_interval: must be > 0"},
		{func(h *Handler) { w := dur(-1); h.Wait = &w }, "wait: must be >= 0"},
		{func(h *Handler) { h.RetryDelay = []caddy.Duration{1, 2, 3} }, "retry_delay: want <min> [<max>], got 3 values"},
		{func(h *Handler) { h.MaxHold = -1 }, "max_hold: must be >= 0"},
		{func(h *Handler) { h.BusyStatus = 302 }, "busy_status: must be a 4xx or 5xx"},
		{func(h *Handler) { h.FencingHeader = "X-F" }, "fencing_header: set but fencing is off"},
		{func(h *Handler) { h.Fencing, h.FencingHeader = true, "a b" }, `fencing: "a b" is not a valid header name`},
		{func(h *Handler) { h.Fencing, h.FencingHeader = true, "content-length" }, "header Content-Length cannot carry"},
		{func(h *Handler) { h.OnUnavailable = "Bypass" }, `on_unavailable: must be "fail" or "bypass"`},
		{func(h *Handler) { h.Prefix = "a\x00" }, "prefix: must not contain a NUL byte"},
		{func(h *Handler) { h.Paths = []PathKey{{Path: "/a/{b"}} }, "path 1 (/a/{b)"},
		{func(h *Handler) { h.Paths = []PathKey{{Path: "/a/{id}", Key: "{http.redlock.param.x}"}} }, "unknown capture"},
		{func(h *Handler) { h.Key = "{path}" }, "{path} is a Caddyfile shorthand, outside a Caddyfile write {http.request.uri.path}"},
		{func(h *Handler) { h.TLS = &TLS{ClientCert: "c.pem"} }, "tls: client_cert: want both a certificate and a key file"},
		{func(h *Handler) { h.TLS = &TLS{CA: []string{" "}} }, "tls: ca: empty file name"},
		{func(h *Handler) { h.Redis = []string{"unix:///"} }, "no socket path"},
		{func(h *Handler) { h.Key, h.Keys = "a", []string{"b", "c"} }, "key: give key or keys, not both"},
		{func(h *Handler) { h.Paths = []PathKey{{Path: "/a", Key: "a", Keys: []string{"b"}}} }, "path 1 (/a): give key or keys, not both"},
		{func(h *Handler) { h.Keys = []string{"a", ""} }, "key: an empty key template"},
		{func(h *Handler) { h.Limit = -1 }, "limit: must be 1 to 64, got -1"},
		{func(h *Handler) { h.Limit = 65 }, "limit: must be 1 to 64, got 65"},
		{func(h *Handler) { h.Limit, h.Shared = 3, []string{"GET"} }, "shared and limit cannot be combined"},
		{func(h *Handler) { h.Shared = []string{"GETT"} }, `shared: unknown method "GETT"`},
	} {
		h := ok()
		tc.mod(&h)
		_, err := h.resolve()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want %q", err, tc.want)
		}
	}
}

func TestCaseInsensitivePatterns(t *testing.T) {
	k, err := newKeyer([]PathKey{{Path: "/Accounts/{ID}/*", Key: "acct:{ID}"}}, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	if got := k.templates[0].Pattern(); got != "/accounts/{ID}/*" {
		t.Errorf("pattern %q: literals must be lowercased, captures kept", got)
	}
	if _, ok := k.templates[0].Match("/accounts/x"); !ok {
		t.Error("lowercased pattern does not match the folded path")
	}
}

// Placeholders of Caddy's path families that cannot be rendered from the normalized path
// are refused at config time, naming the option; the others are accepted.
func TestPathPlaceholdersRefused(t *testing.T) {
	for _, tc := range []struct{ key, err string }{
		{"{http.request.uri.path}", ""},
		{"t:{http.request.uri.path.0}:{http.request.uri.path.file.ext}", ""},
		{"{http.request.orig_uri.path.file_escaped}{http.request.uri_escaped}", ""},
		{"{http.request.uri.query.k}{http.request.orig_uri.prefixed_query}{http.request.uri.query.}", ""},
		{`\{http.request.uri.path.x}`, ""}, // escaped: literal text
		{"{http.request.uri.path.-1}", "placeholder {http.request.uri.path.-1} is derived from the request path"},
		{"a{http.request.uri.path.x}", "{http.request.uri.path.x}"},
		{"{http.request.urix}", "{http.request.urix}"},
		{"{http.request.orig_uri.path.file.base}", "use {http.request.orig_uri.path}"},
		{"{http.request.orig_uri_escaped}", "{http.request.orig_uri_escaped}"},
	} {
		_, errKey := newKeyer(nil, []string{tc.key}, false)
		_, errPath := newKeyer([]PathKey{{Path: "/a/{id}", Key: "{id}" + tc.key}}, nil, false)
		for _, c := range []struct {
			err  error
			want string
		}{{errKey, "key: "}, {errPath, "path 1 (/a/{id}): "}} {
			switch {
			case tc.err == "" && c.err != nil:
				t.Errorf("%q: %v", tc.key, c.err)
			case tc.err != "" && (c.err == nil || !strings.Contains(c.err.Error(), tc.err) || !strings.Contains(c.err.Error(), c.want)):
				t.Errorf("%q: error %v, want one with %q and %q", tc.key, c.err, c.want, tc.err)
			}
		}
	}
}

func TestRetryAfter(t *testing.T) {
	for d, want := range map[time.Duration]string{0: "1", time.Millisecond: "1", time.Second: "1",
		1001 * time.Millisecond: "2", 9500 * time.Millisecond: "10"} {
		if got := retryAfter(d); got != want {
			t.Errorf("retryAfter(%v) = %s, want %s", d, got, want)
		}
	}
}

// The slow-renewal warning: with a node silent a renewal lasts node_timeout, so the
// cadence that must fit in half the ttl is renew_interval + 2×node_timeout.
func TestSlowRenewalRisk(t *testing.T) {
	dur := func(d time.Duration) caddy.Duration { return caddy.Duration(d) }
	for _, c := range []struct {
		name string
		h    Handler
		want bool
	}{
		{"defaults (10s, 100ms, ttl/3)", Handler{}, false},
		{"renew_interval above half the ttl", Handler{TTL: dur(10 * time.Second), RenewInterval: dur(6 * time.Second)}, true},
		{"short ttl, long node_timeout", Handler{TTL: dur(time.Second), NodeTimeout: dur(300 * time.Millisecond)}, true},
		{"short ttl, short node_timeout", Handler{TTL: dur(time.Second), NodeTimeout: dur(50 * time.Millisecond)}, false},
	} {
		c.h.Redis = []string{"127.0.0.1:6379"}
		s, err := c.h.resolve()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := slowRenewalRisk(s); got != c.want {
			t.Errorf("%s: slowRenewalRisk = %v, want %v (renew %v, node_timeout %v, ttl %v)", c.name, got, c.want, s.renew, s.lock.NodeTimeout, s.lock.TTL)
		}
	}
}

// The same warning, logged by a real Caddy at provisioning: for a short ttl with a long
// node_timeout, and not for the defaults.
func TestSlowRenewalWarningLogged(t *testing.T) {
	servers := redistest.StartN(t, 3)
	up := newUpstream(t, 0, nil)
	const warning = "renew_interval plus twice node_timeout is more than half the ttl"
	s := startCaddy(t, "", fmt.Sprintf(`
	redlock {
		%s
	}
%s`, redisLine(servers), proxyTo(up)))
	if s.logContains(warning) {
		t.Fatal("warned with the defaults")
	}
	s.reload(t, fmt.Sprintf(`
	redlock {
		%s
		ttl 1s
		node_timeout 300ms
	}
%s`, redisLine(servers), proxyTo(up)))
	if !eventually(2*time.Second, func() bool { return s.logContains(warning) }) {
		t.Fatal("no warning for ttl 1s with node_timeout 300ms")
	}
}
