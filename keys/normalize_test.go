package keys

import (
	"errors"
	"net/url"
	"testing"
)

// Variants of one resource's path must all give one key.
func TestNormalizeBypassAttempts(t *testing.T) {
	tests := []struct {
		name, path, rawPath string
		fold                bool
	}{
		{"plain", "/accounts/42", "", false},
		{"double slash", "/accounts//42", "", false},
		{"dot segment", "/accounts/./42", "", false},
		{"dot-dot", "/accounts/x/../42", "", false},
		{"trailing slash", "/accounts/42/", "", false},
		{"leading double slash", "//accounts/42", "", false},
		{"many slashes and dots", "///accounts/.//./42//.", "", false},
		{"encoded slash", "/accounts/42", "/accounts%2F42", false},
		{"encoded letter", "/accounts/42", "/%61ccounts/42", false},
		{"encoded dot", "/accounts/./42", "/accounts/%2e/42", false},
		{"no leading slash", "accounts/42", "", false},
		{"clamped at root", "/../../accounts/42", "", false},
		{"clamped mid-path", "/accounts/../../../accounts/42", "", false},
		{"mixed case folded", "/ACCOUNTS/42", "", true},
		{"mixed case, slash and dots folded", "//Accounts/./X/../42/", "", true},
	}
	const want = "/accounts/42"
	for _, tc := range tests {
		got, err := NormalizePath(tc.path, tc.rawPath, tc.fold)
		if err != nil || got != want {
			t.Errorf("%s: NormalizePath(%q, %q, %v) = %q, %v; want %q", tc.name, tc.path, tc.rawPath, tc.fold, got, err, want)
		}
	}
}

// The same attempts as they arrive from net/url, end to end.
func TestNormalizeFromURL(t *testing.T) {
	for _, raw := range []string{
		"/accounts/42", "/accounts//42", "/accounts/./42", "/accounts/x/../42",
		"/accounts/42/", "//accounts/42", "/accounts%2F42", "/%61ccounts/42",
		"/accounts/%2e/42", "/accounts/%2E%2E/accounts/42", "/../../accounts/42",
	} {
		u, err := url.ParseRequestURI(raw)
		if err != nil {
			t.Fatalf("%q: %v", raw, err)
		}
		got, err := NormalizePath(u.Path, u.RawPath, false)
		if err != nil || got != "/accounts/42" {
			t.Errorf("%q (Path %q, RawPath %q) -> %q, %v", raw, u.Path, u.RawPath, got, err)
		}
	}
}

func TestNormalizeOther(t *testing.T) {
	tests := []struct {
		path string
		fold bool
		want string
	}{
		{"", false, "/"},
		{"/", false, "/"},
		{"//", false, "/"},
		{"/..", false, "/"},
		{"/./.", false, "/"},
		{"/a/b/..", false, "/a"},
		{"/a/.../b", false, "/a/.../b"}, // "..." is a name
		{"/a/..b/", false, "/a/..b"},
		{"/a/%2F/b", false, "/a/%2F/b"}, // decoded once only: "%252F" stays literal
		{"/Accounts/42", false, "/Accounts/42"},
		{"/\u00c9T\u00c9", true, "/\u00e9t\u00e9"},
		{"/\u212a", true, "/k"}, // Kelvin sign lowercases to ASCII k
		{"/{http.request.header.X}", false, "/{http.request.header.X}"},
		{"/a\\b", false, "/a\\b"}, // backslash is not a separator
	}
	for _, tc := range tests {
		got, err := NormalizePath(tc.path, "", tc.fold)
		if err != nil || got != tc.want {
			t.Errorf("NormalizePath(%q, %v) = %q, %v; want %q", tc.path, tc.fold, got, err, tc.want)
		}
	}
}

func TestNormalizeErrors(t *testing.T) {
	for _, p := range []string{
		"/a\x00b", "/a\n", "/a\rb", "/\x7f", "/a\tb", "/\x1b[0m",
		"/\xff", "/a\xc3", "/\xed\xa0\x80", // invalid UTF-8 incl. a surrogate
	} {
		for _, fold := range []bool{false, true} {
			got, err := NormalizePath(p, "", fold)
			if err == nil {
				t.Errorf("NormalizePath(%q) = %q, want error", p, got)
			} else if !errors.Is(err, ErrInvalidPath) {
				t.Errorf("NormalizePath(%q) error %v does not wrap ErrInvalidPath", p, err)
			}
		}
	}
}
