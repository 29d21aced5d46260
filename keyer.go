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
	// phPath is the normalized request path: what keys are made of. In a key template
	// every placeholder derived from the path is rendered from it (keyVars).
	phPath = "http.redlock.path"
)

// maxKeys caps the keys one request may take together (several keys on a path or key
// line): redlock.AcquireAll's bound.
const maxKeys = redlock.MaxKeys

// keyer renders lock keys for requests.
type keyer struct {
	foldCase bool
	// pathVars: some key template names a placeholder derived from the path, so keys
	// render through keyVars (else through the request's replacer, which is cheaper).
	pathVars  bool
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
			t, err := keys.ParseTemplate(pattern, kt)
			if err == nil {
				err = k.checkPathPlaceholders(t.KeyTemplate())
			}
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
			t, err := keys.ParseTemplate("/*", kt)
			if err == nil {
				err = k.checkPathPlaceholders(t.KeyTemplate())
			}
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

// checkPathPlaceholders refuses a key template naming a placeholder of Caddy's path
// families that cannot be rendered from the normalized path (keys.PathPlaceholder), and
// notes whether it names one that can (k.pathVars). It lists the names exactly as Caddy's
// replacer scans the template, by running it.
func (k *keyer) checkPathPlaceholders(tmpl string) error {
	var err error
	scan := caddy.NewEmptyReplacer()
	scan.Map(func(name string) (any, bool) {
		src, e := keys.PathPlaceholder(name)
		if e != nil && err == nil {
			err = e
		}
		k.pathVars = k.pathVars || src != keys.NotFromPath
		return "x", true
	})
	_, _ = scan.ReplaceOrErr(tmpl, false, false)
	return err
}

// keyVars answers the placeholders of a key template for one request: those derived
// from the path (keys.PathPlaceholder: {path}, {path.N}, {dir}, {file}, {uri}, the
// original request's {orig_*}, ...) from the normalized path, every other one from the
// request's replacer. Later handlers still see Caddy's own values: only keys are
// rendered this way.
type keyVars struct {
	r    *http.Request
	repl *caddy.Replacer
	norm string // the request's normalized path
	fold bool
	// the original request's normalized path, once asked for; err if it is not valid
	orig     string
	origDone bool
	err      error
}

// replacer is a replacer that renders key templates through v.
func (v *keyVars) replacer() *caddy.Replacer {
	kr := caddy.NewEmptyReplacer()
	kr.Map(v.get)
	return kr
}

func (v *keyVars) get(name string) (any, bool) {
	src, err := keys.PathPlaceholder(name)
	switch {
	case err != nil:
		return nil, false // refused at provision (checkPathPlaceholders)
	case src == keys.FromPath:
		return keys.RenderPathPlaceholder(name, v.norm, v.r.URL.RawQuery)
	case src == keys.FromOrigPath:
		p, q := v.origPath()
		return keys.RenderPathPlaceholder(name, p, q)
	}
	return v.repl.Get(name)
}

// origPath is the original request's normalized path and raw query (the request's own
// when Caddy kept no original, as outside a server).
func (v *keyVars) origPath() (string, string) {
	or, ok := v.r.Context().Value(caddyhttp.OriginalRequestCtxKey).(http.Request)
	if !ok || or.URL == nil {
		return v.norm, v.r.URL.RawQuery
	}
	if !v.origDone {
		v.origDone = true
		v.orig, v.err = keys.NormalizePath(or.URL.Path, or.URL.RawPath, v.fold)
	}
	return v.orig, or.URL.RawQuery
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
	kr, vars := repl, (*keyVars)(nil)
	if k.pathVars {
		vars = &keyVars{r: r, repl: repl, norm: norm, fold: k.foldCase}
		kr = vars.replacer()
	}
	out := make([]string, 0, len(tmpls))
	for _, tmpl := range tmpls {
		key, err := renderKey(tmpl, kr)
		if vars != nil && vars.err != nil {
			return nil, caddyhttp.Error(http.StatusBadRequest, fmt.Errorf("redlock: original request path: %w", vars.err))
		}
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
