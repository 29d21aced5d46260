package keys

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Template is one `path <pattern> [<key>]` line: a path pattern and the key
// template for requests it matches. Create it with [ParseTemplate].
type Template struct {
	pattern string
	segs    []segment
	rest    bool     // pattern ends in "*"
	names   []string // capture names, in order
	key     string   // key template with captures rewritten
}

// segment is one non-"*" pattern segment: a literal or a capture.
type segment struct {
	lit  string
	name string // non-empty for a capture
}

// Param is one named capture.
type Param struct{ Name, Value string }

// ParseTemplate parses a path pattern and an optional key template; an
// empty keyTemplate means the default key (see the package documentation).
// Errors name the problem and the offending pattern or key.
func ParseTemplate(pattern, keyTemplate string) (*Template, error) {
	t, err := parsePattern(pattern)
	if err != nil {
		return nil, fmt.Errorf("keys: pattern %q: %w", pattern, err)
	}
	if keyTemplate == "" {
		keyTemplate = t.defaultKey()
	}
	t.key, err = rewriteKey(keyTemplate, t.names)
	if err != nil {
		return nil, fmt.Errorf("keys: pattern %q: key %q: %w", pattern, keyTemplate, err)
	}
	return t, nil
}

func parsePattern(pattern string) (*Template, error) {
	if pattern == "" {
		return nil, errors.New("empty pattern")
	}
	if pattern[0] != '/' {
		return nil, errors.New(`must start with "/"`)
	}
	if !utf8.ValidString(pattern) {
		return nil, errors.New("invalid UTF-8")
	}
	if i := controlIndex(pattern); i >= 0 {
		return nil, fmt.Errorf("control character %#02x at byte %d", pattern[i], i)
	}
	t := &Template{pattern: pattern}
	if pattern == "/" {
		return t, nil
	}
	parts := strings.Split(pattern[1:], "/")
	for i, s := range parts {
		n := i + 1 // 1-based, for messages
		switch {
		case s == "":
			return nil, fmt.Errorf(`segment %d is empty ("//" or a trailing "/")`, n)
		case s == "*":
			if i != len(parts)-1 {
				return nil, fmt.Errorf(`segment %d: "*" must be the last segment`, n)
			}
			t.rest = true
		case strings.Contains(s, "*"):
			return nil, fmt.Errorf(`segment %d %q: "*" is only allowed as a whole last segment`, n, s)
		case s == "." || s == "..":
			return nil, fmt.Errorf(`segment %d %q never matches a normalized path`, n, s)
		case len(s) >= 2 && s[0] == '{' && s[len(s)-1] == '}':
			name := s[1 : len(s)-1]
			if err := checkCaptureName(name); err != nil {
				return nil, fmt.Errorf("segment %d %q: %w", n, s, err)
			}
			for _, prev := range t.names {
				if prev == name {
					return nil, fmt.Errorf("segment %d: duplicate capture name %q", n, name)
				}
			}
			t.names = append(t.names, name)
			t.segs = append(t.segs, segment{name: name})
		case strings.ContainsAny(s, "{}"):
			return nil, fmt.Errorf("segment %d %q: a capture must be a whole segment {name}", n, s)
		default:
			t.segs = append(t.segs, segment{lit: s})
		}
	}
	return t, nil
}

func checkCaptureName(name string) error {
	if name == "" {
		return errors.New("empty capture name {}")
	}
	if !isIdent(name) {
		if short := expandedShorthand(name); short != "" {
			return fmt.Errorf("capture name {%s} %s", short, shorthandProblem(short))
		}
		return fmt.Errorf("invalid capture name %q: must match [A-Za-z_][A-Za-z0-9_]*", name)
	}
	if why := shorthandProblem(name); why != "" {
		return fmt.Errorf("capture name %q %s; choose another name", name, why)
	}
	return nil
}

// isIdent reports whether s matches [A-Za-z_][A-Za-z0-9_]*.
func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_', 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// defaultKey is the pattern without a trailing "*" and trailing slash.
func (t *Template) defaultKey() string {
	k := strings.TrimSuffix(t.pattern, "*")
	if len(k) > 1 {
		k = strings.TrimSuffix(k, "/")
	}
	return k
}

// Pattern returns the path pattern as given.
func (t *Template) Pattern() string { return t.pattern }

// Names returns the capture names in order.
func (t *Template) Names() []string {
	return append([]string(nil), t.names...)
}

// Match matches an already-normalized path (see [NormalizePath]) and
// returns the captures in pattern order. A path that is not in normalized
// form (no leading "/", empty segments) never matches.
func (t *Template) Match(normPath string) ([]Param, bool) {
	if normPath == "" || normPath[0] != '/' {
		return nil, false
	}
	rest := normPath[1:]
	var params []Param
	for _, s := range t.segs {
		if rest == "" {
			return nil, false
		}
		seg, tail, more := strings.Cut(rest, "/")
		if seg == "" || (more && tail == "") {
			return nil, false
		}
		if s.name == "" {
			if seg != s.lit {
				return nil, false
			}
		} else {
			if params == nil {
				params = make([]Param, 0, len(t.names))
			}
			params = append(params, Param{Name: s.name, Value: seg})
		}
		rest = tail
	}
	if rest != "" && !t.rest {
		return nil, false
	}
	return params, true
}

// KeyTemplate returns the key template in which every capture reference
// {name} is rewritten to {http.redlock.param.name}, so a single pass of
// Caddy's replacer renders it without re-expanding captured values.
func (t *Template) KeyTemplate() string { return t.key }

// FirstMatch tries templates in order; the first match wins. Nil entries
// are skipped.
func FirstMatch(ts []*Template, normPath string) (*Template, []Param, bool) {
	for _, t := range ts {
		if t == nil {
			continue
		}
		if p, ok := t.Match(normPath); ok {
			return t, p, true
		}
	}
	return nil, nil, false
}
