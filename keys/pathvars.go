package keys

import (
	"fmt"
	"net/url"
	"path"
	"strconv"
	"strings"
)

// Caddy's HTTP placeholders that are derived from the request path, as Caddy v2.11.9
// renders them (modules/caddyhttp/replacer.go): the family of the request's path
// ("http.request.uri...", after internal rewrites) and that of the original request
// ("http.request.orig_uri...", as the client sent it). Caddy renders them from the raw
// path, so "/acme/a", "//acme/a" and "/x/../acme/a" give three values of {path.0}; in a
// lock key they are rendered from the normalized path instead (the same rule as the
// key's path, NormalizePath), by these functions.

// PathSource says which path a placeholder is derived from.
type PathSource int

const (
	// NotFromPath: the placeholder does not depend on the path (the query, a header, ...).
	NotFromPath PathSource = iota
	// FromPath: derived from the request's path, after internal rewrites.
	FromPath
	// FromOrigPath: derived from the path of the original request, before any rewrite.
	FromOrigPath
)

const (
	uriFamily     = "http.request.uri"
	origURIFamily = "http.request.orig_uri"
)

// pathVar renders one placeholder from a normalized path p and a raw query q.
type pathVar func(p, q string) string

// uriVars are the names of the "http.request.uri" family after the family prefix (the
// path segments ".path.N" apart); uriQuery those that are not derived from the path.
var (
	uriVars = map[string]pathVar{
		"":                func(p, q string) string { return requestURI(p, q) },
		"_escaped":        func(p, q string) string { return url.QueryEscape(requestURI(p, q)) },
		".path":           func(p, _ string) string { return p },
		".path_escaped":   func(p, _ string) string { return url.QueryEscape(p) },
		".path.file":      func(p, _ string) string { _, f := path.Split(p); return f },
		".path.dir":       func(p, _ string) string { d, _ := path.Split(p); return d },
		".path.file.base": func(p, _ string) string { return strings.TrimSuffix(path.Base(p), path.Ext(p)) },
		".path.file.ext":  func(p, _ string) string { return path.Ext(p) },
	}
	uriQuery = map[string]bool{".query": true, ".query_escaped": true, ".prefixed_query": true}

	origURIVars = map[string]pathVar{
		"":                   func(p, q string) string { return requestURI(p, q) },
		".path":              func(p, _ string) string { return p },
		".path.file":         func(p, _ string) string { _, f := path.Split(p); return f },
		".path.file_escaped": func(p, _ string) string { _, f := path.Split(escapedPath(p)); return f },
		".path.dir":          func(p, _ string) string { d, _ := path.Split(p); return d },
	}
	origURIQuery = map[string]bool{".query": true, ".prefixed_query": true}
)

// PathPlaceholder says which path the Caddy placeholder name (without braces) is derived
// from. A name in one of the two families that Caddy v2.11.9 does not render (a typo, a
// negative segment index, or a placeholder added by a later Caddy) is an error: it may
// be derived from the raw path, so it is refused rather than rendered as Caddy would.
func PathPlaceholder(name string) (PathSource, error) {
	src, _, err := lookupPathVar(name)
	return src, err
}

// RenderPathPlaceholder returns the value of the placeholder name (PathPlaceholder said
// FromPath or FromOrigPath) for a request whose normalized path is p and raw query q:
// what Caddy renders for a request with the path p. ok is false for other names.
func RenderPathPlaceholder(name, p, q string) (value string, ok bool) {
	src, render, err := lookupPathVar(name)
	if err != nil || src == NotFromPath {
		return "", false
	}
	return render(p, q), true
}

func lookupPathVar(name string) (PathSource, pathVar, error) {
	for _, fam := range []struct {
		prefix string
		src    PathSource
		vars   map[string]pathVar
		query  map[string]bool
		hint   string
	}{
		{uriFamily, FromPath, uriVars, uriQuery, "{http.request.uri.path}, {http.request.uri.path.N}, .dir, .file, .file.base, .file.ext"},
		{origURIFamily, FromOrigPath, origURIVars, origURIQuery, "{http.request.orig_uri.path}, {http.request.orig_uri.path.N}, .dir, .file, .file_escaped"},
	} {
		rest, ok := strings.CutPrefix(name, fam.prefix)
		if !ok {
			continue
		}
		if fam.query[rest] || (fam.src == FromPath && strings.HasPrefix(rest, ".query.")) {
			return NotFromPath, nil, nil
		}
		if render, ok := fam.vars[rest]; ok {
			return fam.src, render, nil
		}
		if idx, ok := strings.CutPrefix(rest, ".path."); ok {
			if n, err := strconv.Atoi(idx); err == nil && n >= 0 {
				return fam.src, func(p, _ string) string { return pathSegment(p, n) }, nil
			}
		}
		return NotFromPath, nil, fmt.Errorf("placeholder {%s} is derived from the request path but is not one that can be rendered from the normalized path; use %s", name, fam.hint)
	}
	return NotFromPath, nil, nil
}

// pathSegment is Caddy's {http.request.uri.path.N}: the Nth segment (from 0) of p, ""
// past the last one.
func pathSegment(p string, n int) string {
	parts := strings.Split(p, "/")
	if len(parts) > 0 && parts[0] == "" {
		parts = parts[1:]
	}
	if n >= len(parts) {
		return ""
	}
	return parts[n]
}

// escapedPath is p as it goes on the wire (url.URL.EscapedPath of the normalized path).
func escapedPath(p string) string { return (&url.URL{Path: p}).EscapedPath() }

// requestURI is the normalized path, escaped, with the raw query: Caddy's
// {http.request.uri} of a request with the path p.
func requestURI(p, q string) string {
	return (&url.URL{Path: p, RawQuery: q}).RequestURI()
}
