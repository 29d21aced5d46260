package keys

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// ErrInvalidPath is wrapped by every error from [NormalizePath]; the
// handler answers such requests with 400 Bad Request.
var ErrInvalidPath = errors.New("invalid request path")

// NormalizePath turns a request's decoded path (url.URL.Path) into the
// canonical form used for matching and keying; the exact rule is in the
// package documentation. rawPath (url.URL.RawPath) does not change the
// result: an encoded slash counts as a separator, and the decoded path
// already has it as "/", so rawPath adds no information. It is accepted so
// that callers hand over both and cannot pick the wrong one.
func NormalizePath(path, rawPath string, foldCase bool) (string, error) {
	_ = rawPath
	if !utf8.ValidString(path) {
		return "", fmt.Errorf("%w: invalid UTF-8", ErrInvalidPath)
	}
	if i := controlIndex(path); i >= 0 {
		return "", fmt.Errorf("%w: control character %#02x at byte %d", ErrInvalidPath, path[i], i)
	}
	segs := make([]string, 0, strings.Count(path, "/")+1)
	for s := range strings.SplitSeq(path, "/") {
		switch s {
		case "", ".":
		case "..":
			if len(segs) > 0 {
				segs = segs[:len(segs)-1]
			}
		default:
			segs = append(segs, s)
		}
	}
	out := "/" + strings.Join(segs, "/")
	if foldCase {
		out = strings.ToLower(out)
	}
	return out, nil
}

// controlIndex returns the index of the first byte below 0x20 or equal to
// 0x7f in s, or -1.
func controlIndex(s string) int {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f {
			return i
		}
	}
	return -1
}
