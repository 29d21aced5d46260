package redistest

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// DocsACLSetUser returns the one ACL SETUSER line of docs/connecting.md as a command's
// arguments, with user and password filled in (the line is written for the default key
// prefix): the least-privilege user the documentation gives is exactly the one the ACL
// tests of the plugin and of the library run (Server.Command). It fails the test unless
// the page has exactly one such line. The page is found from the working directory up
// (a package's tests run in its directory, inside the module).
func DocsACLSetUser(t testing.TB, user, password string) []string {
	t.Helper()
	page, err := findUp(filepath.Join("docs", "connecting.md"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(page)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var found []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); strings.HasPrefix(line, "ACL SETUSER ") {
			found = append(found, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 {
		t.Fatalf("docs/connecting.md has %d lines starting with ACL SETUSER, want exactly 1: %q", len(found), found)
	}
	return strings.Fields(strings.NewReplacer("<user>", user, "<password>", password).Replace(found[0]))
}

// findUp returns the path of rel under the working directory or the nearest of its
// parents that has it.
func findUp(rel string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, rel)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", &os.PathError{Op: "find", Path: rel, Err: os.ErrNotExist}
		}
		dir = parent
	}
}
