package keys

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseTemplateGood(t *testing.T) {
	tests := []struct {
		pattern, key string
		names        []string
		wantKey      string
	}{
		{"/", "", nil, "/"},
		{"/*", "", nil, "/"},
		{"/accounts", "", nil, "/accounts"},
		{"/accounts/*", "", nil, "/accounts"},
		{"/accounts/{id}", "", []string{"id"}, "/accounts/{http.redlock.param.id}"},
		{"/accounts/{id}/*", "", []string{"id"}, "/accounts/{http.redlock.param.id}"},
		{"/a/{x}/b/{Y_2}/*", "", []string{"x", "Y_2"}, "/a/{http.redlock.param.x}/b/{http.redlock.param.Y_2}"},
		{"/orgs/{org}/repos/{repo}", "repo:{org}/{repo}", []string{"org", "repo"},
			"repo:{http.redlock.param.org}/{http.redlock.param.repo}"},
		{"/v1/{_id}", "fixed", []string{"_id"}, "fixed"},
		// Names merely starting with a shorthand stem are fine: the
		// adapter only expands "{stem.x}".
		{"/{header_id}/{path_id}/{request_id}/{errcode}/{hosts}", "k", []string{"header_id", "path_id", "request_id", "errcode", "hosts"}, "k"},
		// Literals may hold anything but braces, "*", "/" and controls.
		{"/caf\u00e9/%41/a.b/...", "", nil, "/caf\u00e9/%41/a.b/..."},
	}
	for _, tc := range tests {
		tpl, err := ParseTemplate(tc.pattern, tc.key)
		if err != nil {
			t.Errorf("ParseTemplate(%q, %q): %v", tc.pattern, tc.key, err)
			continue
		}
		if tpl.Pattern() != tc.pattern {
			t.Errorf("Pattern() = %q, want %q", tpl.Pattern(), tc.pattern)
		}
		if !reflect.DeepEqual(tpl.Names(), tc.names) {
			t.Errorf("%q: Names() = %q, want %q", tc.pattern, tpl.Names(), tc.names)
		}
		if got := tpl.KeyTemplate(); got != tc.wantKey {
			t.Errorf("%q %q: KeyTemplate() = %q, want %q", tc.pattern, tc.key, got, tc.wantKey)
		}
	}
}

func TestNamesIsACopy(t *testing.T) {
	tpl, err := ParseTemplate("/{a}/{b}", "")
	if err != nil {
		t.Fatal(err)
	}
	tpl.Names()[0] = "zzz"
	if tpl.Names()[0] != "a" {
		t.Fatal("Names() exposes internal state")
	}
}

func TestParseTemplateBad(t *testing.T) {
	tests := []struct {
		pattern, key string
		want         []string // substrings of the error
	}{
		{"", "", []string{"empty pattern"}},
		{"accounts/{id}", "", []string{`"accounts/{id}"`, `must start with "/"`}},
		{"/a/*/b", "", []string{`"*" must be the last segment`}},
		{"/a/b*", "", []string{`"*" is only allowed as a whole last segment`}},
		{"/a/{}", "", []string{"empty capture name {}"}},
		{"/a/{a b}", "", []string{`invalid capture name "a b"`}},
		{"/a/{1x}", "", []string{`invalid capture name "1x"`}},
		{"/a/{a.b}", "", []string{`invalid capture name "a.b"`}},
		{"/a/{id}x", "", []string{`"{id}x"`, "a capture must be a whole segment"}},
		{"/a/x{id}", "", []string{"a capture must be a whole segment"}},
		{"/a/{id", "", []string{"a capture must be a whole segment"}},
		{"/a/{{id}}", "", []string{"invalid capture name"}},
		{"/{id}/{id}", "", []string{`duplicate capture name "id"`}},
		{"/a//b", "", []string{"segment 2 is empty"}},
		{"/a/", "", []string{"segment 2 is empty"}},
		{"/a/./b", "", []string{"never matches a normalized path"}},
		{"/a/../b", "", []string{"never matches a normalized path"}},
		{"/a\x00", "", []string{"control character 0x00"}},
		{"/a\nb", "", []string{"control character 0x0a"}},
		{"/\xff", "", []string{"invalid UTF-8"}},
		{"/x/{path}", "", []string{`"path"`, "Caddyfile placeholder shorthand", "{http.request.uri.path}"}},
		{"/x/{host}", "", []string{`"host"`, "Caddyfile placeholder shorthand"}},
		{"/x/{query}", "", []string{`"query"`, "Caddyfile placeholder shorthand"}},
		{"/x/{method}", "", []string{`"method"`, "Caddyfile placeholder shorthand"}},
		{"/x/{uri}", "", []string{`"uri"`, "Caddyfile placeholder shorthand"}},
		{"/x/{tls_client_serial}", "", []string{"Caddyfile placeholder shorthand"}},
		{"/x/{client_ip}", "", []string{"Caddyfile placeholder shorthand"}},
		{"/x/{header}", "", []string{`"header"`, "reserved", "{header.x}"}},
		{"/x/{re}", "", []string{`"re"`, "reserved"}},
		// What a Caddyfile hands over after expanding {path}.
		{"/x/{http.request.uri.path}", "", []string{"{path}", "Caddyfile placeholder shorthand"}},
		// Key template problems.
		{"/accounts/{id}", "acct:{x}", []string{`key "acct:{x}"`, "unknown capture {x} in key; captures are: id"}},
		{"/accounts/{id}/{sub}", "{id}:{subb}", []string{"unknown capture {subb} in key; captures are: id, sub"}},
		{"/accounts", "{id}", []string{"unknown capture {id} in key; captures are: none"}},
		{"/accounts/{id}", "{host}:{id}", []string{"unknown capture {host}", "write {http.request.host}"}},
		{"/accounts/{id}", "{http.redlock.param.nope}", []string{"unknown capture {http.redlock.param.nope}"}},
		{"/a", strings.Repeat("{", 101), []string{"101 unclosed"}},
	}
	for _, tc := range tests {
		tpl, err := ParseTemplate(tc.pattern, tc.key)
		if err == nil {
			t.Errorf("ParseTemplate(%q, %q) = %q, want error", tc.pattern, tc.key, tpl.KeyTemplate())
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("ParseTemplate(%q, %q) error %q does not contain %q", tc.pattern, tc.key, err, w)
			}
		}
	}
}

// Every simple shorthand of the Caddyfile adapter is refused as a name.
func TestAllShorthandsRefused(t *testing.T) {
	for name := range caddyfileShorthands {
		if _, err := ParseTemplate("/{"+name+"}", ""); err == nil {
			t.Errorf("capture name %q accepted", name)
		}
		if _, err := ParseTemplate("/{"+caddyfileShorthands[name]+"}", ""); err == nil ||
			!strings.Contains(err.Error(), "{"+name+"}") {
			t.Errorf("expanded shorthand %q: error %v does not name {%s}", caddyfileShorthands[name], err, name)
		}
	}
	for name := range caddyfileShorthandStems {
		if _, err := ParseTemplate("/{"+name+"}", ""); err == nil {
			t.Errorf("capture name %q accepted", name)
		}
	}
}

func TestMatch(t *testing.T) {
	tests := []struct {
		pattern, path string
		ok            bool
		params        []Param
	}{
		{"/", "/", true, nil},
		{"/", "/a", false, nil},
		{"/*", "/", true, nil},
		{"/*", "/a/b/c", true, nil},
		{"/accounts", "/accounts", true, nil},
		{"/accounts", "/accounts/42", false, nil},
		{"/accounts", "/Accounts", false, nil},
		{"/accounts/{id}", "/accounts/42", true, []Param{{"id", "42"}}},
		{"/accounts/{id}", "/accounts", false, nil},
		{"/accounts/{id}", "/accounts/42/x", false, nil},
		{"/accounts/{id}", "/users/42", false, nil},
		{"/accounts/{id}/*", "/accounts/42", true, []Param{{"id", "42"}}},
		{"/accounts/{id}/*", "/accounts/42/a/b", true, []Param{{"id", "42"}}},
		{"/accounts/{id}/*", "/accounts", false, nil},
		{"/{a}/x/{b}", "/1/x/2", true, []Param{{"a", "1"}, {"b", "2"}}},
		{"/{a}/x/{b}", "/1/y/2", false, nil},
		{"/h/{v}", "/h/{http.request.header.X}", true, []Param{{"v", "{http.request.header.X}"}}},
		// Not normalized: never matches.
		{"/accounts/{id}", "accounts/42", false, nil},
		{"/accounts/{id}", "/accounts//42", false, nil},
		{"/accounts/{id}", "/accounts/42/", false, nil},
		{"/accounts/{id}", "", false, nil},
	}
	for _, tc := range tests {
		tpl, err := ParseTemplate(tc.pattern, "")
		if err != nil {
			t.Fatal(err)
		}
		params, ok := tpl.Match(tc.path)
		if ok != tc.ok || !reflect.DeepEqual(params, tc.params) {
			t.Errorf("%q.Match(%q) = %v, %v; want %v, %v", tc.pattern, tc.path, params, ok, tc.params, tc.ok)
		}
	}
}

func TestFirstMatch(t *testing.T) {
	var ts []*Template
	for _, p := range []string{"/accounts/admin", "/accounts/{id}/*", "/*"} {
		tpl, err := ParseTemplate(p, "")
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, tpl)
	}
	ts = append([]*Template{nil}, ts...)
	tests := []struct{ path, want string }{
		{"/accounts/admin", "/accounts/admin"},
		{"/accounts/7/x", "/accounts/{id}/*"},
		{"/other", "/*"},
	}
	for _, tc := range tests {
		tpl, _, ok := FirstMatch(ts, tc.path)
		if !ok || tpl.Pattern() != tc.want {
			t.Errorf("FirstMatch(%q) = %v, %v; want %q", tc.path, tpl, ok, tc.want)
		}
	}
	if _, _, ok := FirstMatch(ts[:2], "/x"); ok {
		t.Error("FirstMatch matched nothing-matching path")
	}
}

func TestKeyTemplateRewrite(t *testing.T) {
	tests := []struct {
		key, want string
	}{
		{"{id}", "{http.redlock.param.id}"},
		{"acct:{id}:{sub}", "acct:{http.redlock.param.id}:{http.redlock.param.sub}"},
		{"{http.request.host}/{id}", "{http.request.host}/{http.redlock.param.id}"},
		{"{http.request.header.X-Tenant}:{id}:{env.ZONE}", "{http.request.header.X-Tenant}:{http.redlock.param.id}:{env.ZONE}"},
		{"{http.redlock.param.id}", "{http.redlock.param.id}"},
		{`\{id}:{id}`, `\{id}:{http.redlock.param.id}`},
		{"{a{id}}", "{a{http.redlock.param.id}}"},
		{"{}:{a b}:{-x}:{id}", "{}:{a b}:{-x}:{http.redlock.param.id}"},
		{"no placeholders", "no placeholders"},
		{"{id", "{id"},
		{"}{id}{", "}{http.redlock.param.id}{"},
	}
	for _, tc := range tests {
		tpl, err := ParseTemplate("/t/{id}/{sub}", tc.key)
		if err != nil {
			t.Errorf("key %q: %v", tc.key, err)
			continue
		}
		if got := tpl.KeyTemplate(); got != tc.want {
			t.Errorf("key %q: KeyTemplate() = %q, want %q", tc.key, got, tc.want)
		}
	}
}

// A captured value that looks like a placeholder stays literal after one
// pass of (a model of) Caddy's replacer.
func TestKeyRenderingDoesNotReexpand(t *testing.T) {
	tpl, err := ParseTemplate("/t/{id}", "{http.request.host}:{id}")
	if err != nil {
		t.Fatal(err)
	}
	params, ok := tpl.Match("/t/{http.request.header.X}")
	if !ok {
		t.Fatal("no match")
	}
	vals := map[string]string{
		"http.request.host":           "example.com",
		"http.request.header.X":       "SECRET",
		ParamPlaceholderPrefix + "id": params[0].Value,
	}
	got := caddyReplace(tpl.KeyTemplate(), vals)
	if want := "example.com:{http.request.header.X}"; got != want {
		t.Fatalf("rendered %q, want %q", got, want)
	}
}

// caddyReplace models one pass of caddy.Replacer.ReplaceAll with unknown
// placeholders left as they are.
func caddyReplace(in string, vals map[string]string) string {
	var b strings.Builder
	last := 0
	for i := 0; i < len(in); i++ {
		if i > 0 && in[i-1] == '\\' && (in[i] == '{' || in[i] == '}') {
			b.WriteString(in[last : i-1])
			last = i
			continue
		}
		if in[i] != '{' {
			continue
		}
		end := strings.IndexByte(in[i:], '}')
		if end < 0 {
			continue
		}
		end += i
		v, ok := vals[in[i+1:end]]
		if !ok {
			continue
		}
		b.WriteString(in[last:i])
		b.WriteString(v)
		i = end
		last = end + 1
	}
	b.WriteString(in[last:])
	return b.String()
}
