package caddyredlock

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// The docs are several pages that link to each other and to the code: a renamed heading
// or a moved file must not leave a link dead. Every relative link in every Markdown file
// of the repository must name a file that exists and, with a #fragment into a Markdown
// file, a heading of that file (as GitHub renders its anchor).
func TestDocsLinks(t *testing.T) {
	files := markdownFiles(t)
	anchors := map[string]map[string]bool{}
	for _, f := range files {
		anchors[f] = markdownAnchors(t, f)
	}
	checked := 0
	for _, f := range files {
		for _, l := range markdownLinks(t, f) {
			target, frag, _ := strings.Cut(l.dest, "#")
			path := f
			if target != "" {
				path = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(f), target)))
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s:%d: link %q: no file %s", f, l.line, l.dest, path)
					continue
				}
			}
			checked++
			if frag == "" || !strings.HasSuffix(path, ".md") {
				continue
			}
			if !anchors[path][frag] {
				t.Errorf("%s:%d: link %q: %s has no heading with anchor #%s", f, l.line, l.dest, path, frag)
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d links checked: is the link pattern still right?", checked)
	}
}

// markdownFiles lists the repository's Markdown files, slash-separated, relative to it.
func markdownFiles(t *testing.T) []string {
	var out []string
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			out = append(out, filepath.ToSlash(p))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

type mdLink struct {
	line int
	dest string
}

var (
	mdLinkRE   = regexp.MustCompile(`\]\(([^()\s]+)(?:\s+"[^"]*")?\)`)
	codeSpanRE = regexp.MustCompile("`[^`]*`")
	schemeRE   = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// markdownLinks returns the relative link destinations of f, outside code blocks and
// code spans.
func markdownLinks(t *testing.T, f string) []mdLink {
	var out []mdLink
	eachProseLine(t, f, func(n int, line string) {
		line = codeSpanRE.ReplaceAllString(line, "")
		for _, m := range mdLinkRE.FindAllStringSubmatch(line, -1) {
			if d := m[1]; !schemeRE.MatchString(d) {
				out = append(out, mdLink{n, d})
			}
		}
	})
	return out
}

// markdownAnchors returns the anchors GitHub gives the headings of f: lowercased, with
// punctuation other than '-' and '_' dropped, spaces made '-', repeats numbered.
func markdownAnchors(t *testing.T, f string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	eachProseLine(t, f, func(_ int, line string) {
		h := strings.TrimLeft(line, "#")
		if len(h) == len(line) || len(line)-len(h) > 6 || !strings.HasPrefix(h, " ") {
			return
		}
		a := githubAnchor(h)
		if k := seen[a]; k > 0 {
			out[a+"-"+strconv.Itoa(k)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	})
	return out
}

var inlineLinkRE = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

func githubAnchor(heading string) string {
	h := inlineLinkRE.ReplaceAllString(strings.TrimSpace(heading), "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// eachProseLine calls fn with every line of f outside fenced code blocks.
func eachProseLine(t *testing.T, f string, fn func(n int, line string)) {
	file, err := os.Open(f)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	sc := bufio.NewScanner(file)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	fence := ""
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimLeft(line, " \t")
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			switch {
			case fence == "":
				fence = trimmed[:3]
			case strings.HasPrefix(trimmed, fence):
				fence = ""
			}
			continue
		}
		if fence == "" {
			fn(n, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}

func TestGitHubAnchor(t *testing.T) {
	for h, want := range map[string]string{
		"TLS: private CAs, client certificates, nodes addressed by IP": "tls-private-cas-client-certificates-nodes-addressed-by-ip",
		"`GET /redlock/keys?key=K`":                                    "get-redlockkeyskeyk",
		"Using the `redlock` package as a library":                     "using-the-redlock-package-as-a-library",
		"`caddy redlock`: the command line":                            "caddy-redlock-the-command-line",
		"Servers: what is tested, what is needed":                      "servers-what-is-tested-what-is-needed",
	} {
		if got := githubAnchor(h); got != want {
			t.Errorf("githubAnchor(%q) = %q, want %q", h, got, want)
		}
	}
}

// The least-privilege ACL user is one line, in one place: the ACL tests run exactly that
// line (redistest.DocsACLSetUser), so a second copy elsewhere could drift.
func TestDocsOneACLLine(t *testing.T) {
	var where []string
	for _, f := range markdownFiles(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(strings.TrimSpace(l), "ACL SETUSER ") {
				where = append(where, f)
			}
		}
	}
	if len(where) != 1 || where[0] != "docs/connecting.md" {
		t.Fatalf("lines starting with ACL SETUSER in %q, want one, in docs/connecting.md", where)
	}
}
