package keys

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The shorthand tables (shorthands.go) are copies of Caddy's. This test reads Caddy's own
// (caddyconfig/httpcaddyfile/shorthands.go of the Caddy version in go.mod, from the
// module cache) and fails when they differ: after a Caddy upgrade, copy them again.
func TestShorthandsMatchCaddy(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/caddyserver/caddy/v2").Output()
	dir := strings.TrimSpace(string(out))
	if err != nil || dir == "" {
		t.Skipf("Caddy's source is not in the module cache (go list: %v)", err)
	}
	file := filepath.Join(dir, "caddyconfig", "httpcaddyfile", "shorthands.go")
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}

	// placeholderShorthands: "{name}", "{expansion}" pairs; only names that could be
	// capture names are copied.
	simple := map[string]string{}
	lits := stringLits(t, f, "placeholderShorthands")
	for i := 0; i+1 < len(lits); i += 2 {
		name, exp := strings.Trim(lits[i], "{}"), strings.Trim(lits[i+1], "{}")
		if isIdent(name) {
			simple[name] = exp
		}
	}
	if d := mapDiff(caddyfileShorthands, simple); d != "" {
		t.Errorf("caddyfileShorthands differs from Caddy's placeholderShorthands (%s): %s", file, d)
	}

	// NewShorthandReplacer's regexps: `{stem\.(...)}`, "{expansion.$1}" pairs.
	stems := map[string]string{}
	stem := regexp.MustCompile(`^\{(\w+)\\\.`)
	lits = stringLits(t, f, "NewShorthandReplacer")
	for i := 0; i+1 < len(lits); i += 2 {
		m := stem.FindStringSubmatch(lits[i])
		if m == nil {
			t.Fatalf("unexpected shape of a regexp shorthand in %s: %q", file, lits[i])
		}
		stems[m[1]] = strings.Replace(strings.Trim(lits[i+1], "{}"), "$1", "*", 1)
	}
	if d := mapDiff(caddyfileShorthandStems, stems); d != "" {
		t.Errorf("caddyfileShorthandStems differs from Caddy's regexp shorthands (%s): %s", file, d)
	}
}

// mapDiff lists the entries where mine (the copy) and caddy differ, or returns "".
func mapDiff(mine, caddy map[string]string) string {
	var d []string
	for _, k := range slices.Sorted(maps.Keys(caddy)) {
		if c, ok := mine[k]; !ok || c != caddy[k] {
			d = append(d, fmt.Sprintf("%s: copy %q, Caddy %q", k, c, caddy[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(mine)) {
		if _, ok := caddy[k]; !ok {
			d = append(d, fmt.Sprintf("%s: copy %q, not in Caddy", k, mine[k]))
		}
	}
	return strings.Join(d, "; ")
}

// stringLits returns the string literals of function fn in f, in order.
func stringLits(t *testing.T, f *ast.File, fn string) []string {
	t.Helper()
	var out []string
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Name.Name != fn {
			continue
		}
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				v, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, v)
			}
			return true
		})
	}
	if len(out) == 0 {
		t.Fatalf("no function %s with string literals in Caddy's shorthands.go: it moved; find Caddy's shorthands and copy them again", fn)
	}
	return out
}
