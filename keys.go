package caddyredlock

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/caddy-redlock/caddy-redlock/keys"
	"github.com/caddy-redlock/caddy-redlock/redlock"
)

// This file glues the keys package (templates, normalization, bounding) to Caddy's
// replacer: it turns a request into the lock key, or says the request is not locked.

// Placeholders set by the handler.
const (
	phKey    = "http.redlock.key"
	phToken  = "http.redlock.token"
	phWaitMS = "http.redlock.wait_ms"
	phMode   = "http.redlock.mode" // exclusive, shared or limit
	// phPath is the normalized request path: what keys are made of. Key templates that
	// name {http.request.uri.path} get it instead (see rewritePathPlaceholder).
	phPath = "http.redlock.path"
)

// maxKeys caps the keys one request may take together (several keys on a path or key
// line): redlock.AcquireAll's bound.
const maxKeys = redlock.MaxKeys

// keyer renders lock keys for requests.
type keyer struct {
	foldCase  bool
	templates []*keys.Template // matched in order (with the first key of each path)
	// keys are the key templates of each path template, as rendered by the replacer.
	keys [][]string
	// fallback are the key templates for requests no path template matches; none means
	// such requests are not locked.
	fallback []string
}

// keyTemplates is the key templates of a path or key line: key (one) or several (JSON
// keys), not both.
func keyTemplates(key string, several []string) ([]string, error) {
	switch {
	case key != "" && len(several) > 0:
		return nil, errors.New("give key or keys, not both")
	case len(several) > maxKeys:
		return nil, fmt.Errorf("%d keys, at most %d may be taken together", len(several), maxKeys)
	case key != "":
		return []string{key}, nil
	}
	for _, k := range several {
		if k == "" {
			return nil, errors.New("an empty key template")
		}
	}
	return several, nil
}

// newKeyer parses the path templates and the fallback key templates, naming the option
// in errors.
func newKeyer(paths []PathKey, fallback []string, foldCase bool) (*keyer, error) {
	k := &keyer{foldCase: foldCase}
	for i, p := range paths {
		pattern := p.Path
		if foldCase {
			pattern = lowerLiterals(pattern)
		}
		kts, err := keyTemplates(p.Key, p.Keys)
		if err != nil {
			return nil, fmt.Errorf("path %d (%s): %w", i+1, p.Path, err)
		}
		if len(kts) == 0 {
			kts = []string{""} // the pattern with its captures filled in
		}
		var rendered []string
		for j, kt := range kts {
			t, err := keys.ParseTemplate(pattern, rewritePathPlaceholder(kt))
			if err != nil {
				return nil, fmt.Errorf("path %d (%s): %w", i+1, p.Path, err)
			}
			if j == 0 {
				k.templates = append(k.templates, t)
			}
			rendered = append(rendered, t.KeyTemplate())
		}
		k.keys = append(k.keys, rendered)
	}
	switch {
	case len(fallback) > maxKeys:
		return nil, fmt.Errorf("key: %d keys, at most %d may be taken together", len(fallback), maxKeys)
	case len(fallback) > 0:
		for _, kt := range fallback {
			// A pattern without captures validates the key as a template that may only
			// use Caddy placeholders.
			t, err := keys.ParseTemplate("/*", rewritePathPlaceholder(kt))
			if err != nil {
				return nil, fmt.Errorf("key: %w", err)
			}
			k.fallback = append(k.fallback, t.KeyTemplate())
		}
	case len(paths) == 0:
		k.fallback = []string{"{" + phPath + "}"}
	}
	return k, nil
}

// lowerLiterals lowercases the literal segments of a path pattern (captures and "*" keep
// their case), so that case_insensitive patterns match the lowercased path.
func lowerLiterals(pattern string) string {
	segs := strings.Split(pattern, "/")
	for i, s := range segs {
		if !strings.HasPrefix(s, "{") {
			segs[i] = strings.ToLower(s)
		}
	}
	return strings.Join(segs, "/")
}

// rewritePathPlaceholder makes {http.request.uri.path} (the Caddyfile's {path}) in a key
// template mean the normalized path: a raw path in a lock key would let "/a//b" and "/a/b"
// take two different locks.
func rewritePathPlaceholder(tmpl string) string {
	const raw = "{http.request.uri.path}"
	var b strings.Builder
	for {
		i := strings.Index(tmpl, raw)
		if i < 0 {
			b.WriteString(tmpl)
			return b.String()
		}
		b.WriteString(tmpl[:i])
		if i > 0 && tmpl[i-1] == '\\' { // escaped: literal text
			b.WriteString(raw)
		} else {
			b.WriteString("{" + phPath + "}")
		}
		tmpl = tmpl[i+len(raw):]
	}
}

// errUnlocked says the request matches no path template and there is no fallback key.
var errUnlocked = errors.New("redlock: no path template matches")

// render normalizes the request path, picks the template, sets the captures and the
// normalized path on the replacer, and renders the bounded keys: sorted, duplicates
// merged (the one order every request takes its keys in, so that none can deadlock).
// Its errors are caddyhttp.HandlerErrors (400 for bad paths and empty keys), or
// errUnlocked.
func (k *keyer) render(r *http.Request, repl *caddy.Replacer) ([]string, error) {
	norm, err := keys.NormalizePath(r.URL.Path, r.URL.RawPath, k.foldCase)
	if err != nil {
		return nil, caddyhttp.Error(http.StatusBadRequest, fmt.Errorf("redlock: %w", err))
	}
	repl.Set(phPath, norm)
	tmpls := k.fallback
	if t, params, ok := keys.FirstMatch(k.templates, norm); ok {
		for _, p := range params {
			repl.Set(keys.ParamPlaceholderPrefix+p.Name, p.Value)
		}
		tmpls = k.keys[slices.Index(k.templates, t)]
	} else if len(tmpls) == 0 {
		return nil, errUnlocked
	}
	out := make([]string, 0, len(tmpls))
	for _, tmpl := range tmpls {
		key, err := renderKey(tmpl, repl)
		if err != nil {
			return nil, err
		}
		out = append(out, key)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// renderKey renders one key template.
func renderKey(tmpl string, repl *caddy.Replacer) (string, error) {
	// Unknown placeholders are an error rather than literal text: a typo would otherwise
	// put every request under one lock.
	key, err := repl.ReplaceOrErr(tmpl, false, true)
	if err != nil {
		return "", caddyhttp.Error(http.StatusInternalServerError, fmt.Errorf("redlock: rendering key template %q: %w", tmpl, err))
	}
	if key == "" {
		return "", caddyhttp.Error(http.StatusBadRequest, errors.New("redlock: lock key rendered empty"))
	}
	if strings.IndexByte(key, 0) >= 0 {
		return "", caddyhttp.Error(http.StatusBadRequest, errors.New("redlock: lock key contains a NUL byte"))
	}
	return keys.Bound(key), nil
}
