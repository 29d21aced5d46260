package keys

import (
	"fmt"
	"strings"
)

// ParamPlaceholderPrefix is what capture names are rewritten to in key
// templates: {id} becomes {http.redlock.param.id}.
const ParamPlaceholderPrefix = "http.redlock.param."

// rewriteKey rewrites each capture reference {name} in key to
// {ParamPlaceholderPrefix+name}. It scans like Caddy's replacer: a "{" not
// preceded by a backslash opens a placeholder that ends at the next "}".
// A bare identifier that is not a capture is an error, as is
// {http.redlock.param.x} for a non-capture x; other placeholders are left.
func rewriteKey(key string, names []string) (string, error) {
	isCapture := func(n string) bool {
		for _, c := range names {
			if c == n {
				return true
			}
		}
		return false
	}
	var b strings.Builder
	last := 0
	for i := 0; i < len(key); i++ {
		if key[i] != '{' || (i > 0 && key[i-1] == '\\') {
			continue
		}
		end := strings.IndexByte(key[i+1:], '}')
		if end < 0 {
			// No placeholder can start here or later. Caddy's replacer
			// gives up (renders "") on more than 100 unclosed braces.
			if n := unclosedOpens(key[i:]); n > maxUnclosed {
				return "", fmt.Errorf("%d unclosed \"{\"; Caddy's replacer refuses more than %d", n, maxUnclosed)
			}
			break
		}
		inner := key[i+1 : i+1+end]
		name, prefixed := strings.CutPrefix(inner, ParamPlaceholderPrefix)
		if !prefixed && !isIdent(inner) {
			continue // a Caddy placeholder (or text); a nested "{" is seen next
		}
		if !isCapture(name) {
			return "", unknownCapture(inner, names)
		}
		if !prefixed {
			b.WriteString(key[last:i])
			b.WriteString("{" + ParamPlaceholderPrefix + name + "}")
			last = i + 2 + end
		}
		i += 1 + end
	}
	if last == 0 {
		return key, nil
	}
	b.WriteString(key[last:])
	return b.String(), nil
}

// maxUnclosed is the number of unclosed "{" Caddy's replacer tolerates.
const maxUnclosed = 100

// unclosedOpens counts the "{" in s that are not preceded by a backslash.
func unclosedOpens(s string) int {
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '{' && (i == 0 || s[i-1] != '\\') {
			n++
		}
	}
	return n
}

func unknownCapture(ref string, names []string) error {
	caps := "none"
	if len(names) > 0 {
		caps = strings.Join(names, ", ")
	}
	hint := "; other placeholders must have a dotted name such as {http.request.host}"
	if exp, ok := caddyfileShorthands[ref]; ok {
		hint = fmt.Sprintf("; {%s} is a Caddyfile shorthand, outside a Caddyfile write {%s}", ref, exp)
	}
	return fmt.Errorf("unknown capture {%s} in key; captures are: %s%s", ref, caps, hint)
}
