package keys

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func FuzzNormalizePath(f *testing.F) {
	for _, s := range []string{
		"", "/", "//", "/accounts/42", "/accounts//42/", "/../../a", "/a/./b/../c",
		"a/b", "/%2e%2e/", "/\u00c9T\u00c9/\u212a", "/a\x00", "/\xff", "/.../..../",
	} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, p string, fold bool) {
		n, err := NormalizePath(p, "", fold)
		if err != nil {
			return
		}
		n2, err := NormalizePath(n, "", fold)
		if err != nil || n2 != n {
			t.Fatalf("not idempotent: %q -> %q -> %q, %v", p, n, n2, err)
		}
		if !strings.HasPrefix(n, "/") || strings.Contains(n, "//") ||
			strings.Contains(n+"/", "/./") || strings.Contains(n+"/", "/../") ||
			(n != "/" && strings.HasSuffix(n, "/")) {
			t.Fatalf("not canonical: %q -> %q", p, n)
		}
		if !utf8.ValidString(n) || controlIndex(n) >= 0 {
			t.Fatalf("bad bytes in %q", n)
		}
	})
}

func FuzzParseTemplate(f *testing.F) {
	for _, s := range [][2]string{
		{"/", ""}, {"/*", ""}, {"/accounts/{id}/*", ""}, {"/a/{x}/b/{y}", "{x}:{y}:{http.request.host}"},
		{"/a/{id}x", ""}, {"/{path}", ""}, {"/{id}", `\{id}{a{id}}{`}, {"", ""}, {"/a/*/b", "{"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, key string) {
		tpl, err := ParseTemplate(pattern, key)
		if err != nil {
			return
		}
		// Render a literal path from the pattern; it must be normalized
		// and must match with the expected captures.
		var segs []string
		var want []Param
		for i, s := range tpl.segs {
			if s.name == "" {
				segs = append(segs, s.lit)
				continue
			}
			v := "v" + strconv.Itoa(i)
			segs = append(segs, v)
			want = append(want, Param{s.name, v})
		}
		path := "/" + strings.Join(segs, "/")
		if n, err := NormalizePath(path, "", false); err != nil || n != path {
			t.Fatalf("rendered path %q not normalized (%q, %v)", path, n, err)
		}
		longer := strings.TrimSuffix(path, "/") + "/r/s"
		if got, ok := tpl.Match(path); !ok || !reflect.DeepEqual(got, want) {
			t.Fatalf("%q.Match(%q) = %v, %v; want %v", pattern, path, got, ok, want)
		}
		if got, ok := tpl.Match(longer); ok != tpl.rest || (ok && !reflect.DeepEqual(got, want)) {
			t.Fatalf("%q.Match(%q) = %v, %v", pattern, longer, got, ok)
		}
		if len(tpl.Names()) != len(want) {
			t.Fatalf("Names() = %v, captures %v", tpl.Names(), want)
		}
		// The rewrite is a fixpoint: its output is a valid key template
		// that rewrites to itself.
		again, err := ParseTemplate(pattern, tpl.KeyTemplate())
		if err != nil || again.KeyTemplate() != tpl.KeyTemplate() {
			t.Fatalf("key %q -> %q does not reparse to itself (%v)", key, tpl.KeyTemplate(), err)
		}
		// The default key renders to the matched path without the rest.
		if key == "" {
			vals := map[string]string{}
			for _, p := range want {
				vals[ParamPlaceholderPrefix+p.Name] = p.Value
			}
			if got := caddyReplace(tpl.KeyTemplate(), vals); got != path {
				t.Fatalf("default key of %q renders %q, want %q", pattern, got, path)
			}
		}
	})
}

// FuzzPathPlaceholders: from a normalized path, every path placeholder renders without
// panicking; segments are whole normalized segments (no "/", never "." or ".."), and
// dir + file give the path back.
func FuzzPathPlaceholders(f *testing.F) {
	for _, s := range []string{"/", "/acme/a.txt", "//x/./y/../z.tar.gz/", "/a%2Fb", "/\u00e9/\u212a", "/.../x"} {
		f.Add(s, "v=1&w", false)
		f.Add(s, "", true)
	}
	f.Fuzz(func(t *testing.T, raw, q string, fold bool) {
		p, err := NormalizePath(raw, "", fold)
		if err != nil {
			return
		}
		for _, fam := range []string{uriFamily, origURIFamily} {
			for i := range 4 {
				seg, ok := RenderPathPlaceholder(fam+".path."+strconv.Itoa(i), p, q)
				if !ok || strings.Contains(seg, "/") || seg == "." || seg == ".." {
					t.Fatalf("%q: segment %d of %s = %q, %v", p, i, fam, seg, ok)
				}
			}
			dir, _ := RenderPathPlaceholder(fam+".path.dir", p, q)
			file, _ := RenderPathPlaceholder(fam+".path.file", p, q)
			if dir+file != p || !strings.HasSuffix(dir, "/") {
				t.Fatalf("%q: dir %q + file %q", p, dir, file)
			}
			if uri, _ := RenderPathPlaceholder(fam, p, q); !strings.HasPrefix(uri, "/") {
				t.Fatalf("%q: uri %q", p, uri)
			}
		}
		for name := range uriVars {
			if _, ok := RenderPathPlaceholder(uriFamily+name, p, q); !ok {
				t.Fatalf("{%s%s} not rendered", uriFamily, name)
			}
		}
		for name := range origURIVars {
			if _, ok := RenderPathPlaceholder(origURIFamily+name, p, q); !ok {
				t.Fatalf("{%s%s} not rendered", origURIFamily, name)
			}
		}
	})
}
