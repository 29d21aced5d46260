package caddyredlock

import (
	"net/url"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"
)

// parseFencingPairs reads the several-keys fencing header as an upstream would, with
// nothing but a standard percent-decoder (decode: url.PathUnescape or QueryUnescape).
func parseFencingPairs(t testing.TB, h string, decode func(string) (string, error)) (keys []string, tokens []int64) {
	t.Helper()
	for p := range strings.SplitSeq(h, ",") {
		k, tok, ok := strings.Cut(p, "=")
		if !ok {
			t.Fatalf("header %q: pair %q has no =", h, p)
		}
		key, err := decode(k)
		if err != nil {
			t.Fatalf("header %q: key %q: %v", h, k, err)
		}
		n, err := strconv.ParseInt(tok, 10, 64)
		if err != nil {
			t.Fatalf("header %q: token %q: %v", h, tok, err)
		}
		keys, tokens = append(keys, key), append(tokens, n)
	}
	return keys, tokens
}

// FuzzFencingPairs: whatever bytes the keys hold, the header is a valid header value of
// visible ASCII, and splitting it at "," and "=" and percent-decoding each key (either
// decoder) gives back exactly the keys and tokens, so no key can forge a pair.
func FuzzFencingPairs(f *testing.F) {
	for _, s := range [][2]string{
		{"account:a", "account:b=99999999999999999,account:c"},
		{"a+b c", "x%2Cy"}, {"k\r\n\x1b[2J", "\xff\x00"}, {"é", "="}, {",", "%"},
	} {
		f.Add(s[0], s[1], int64(1), int64(2))
	}
	f.Fuzz(func(t *testing.T, k1, k2 string, t1, t2 int64) {
		keys, tokens := []string{k1, k2}, []int64{t1, t2}
		h := fencingPairs(keys, tokens)
		if !httpguts.ValidHeaderFieldValue(h) {
			t.Fatalf("%q is not a valid header value", h)
		}
		for i := 0; i < len(h); i++ {
			if h[i] <= ' ' || h[i] >= 0x7f {
				t.Fatalf("%q: byte %#02x is not visible ASCII", h, h[i])
			}
		}
		for _, decode := range []func(string) (string, error){url.PathUnescape, url.QueryUnescape} {
			gotKeys, gotTokens := parseFencingPairs(t, h, decode)
			if len(gotKeys) != 2 || gotKeys[0] != k1 || gotKeys[1] != k2 || gotTokens[0] != t1 || gotTokens[1] != t2 {
				t.Fatalf("%q %q %d %d: header %q reads back as %q %d", k1, k2, t1, t2, h, gotKeys, gotTokens)
			}
		}
	})
}

// A key of visible ASCII without , = % + is sent as it is (the header did not change for
// such keys).
func TestFencingPairsPlainKeysUnchanged(t *testing.T) {
	if got := fencingPairs([]string{"account:a", "/docs/x_y-z.txt"}, []int64{7, 8}); got != "account:a=7,/docs/x_y-z.txt=8" {
		t.Errorf("plain keys: %q", got)
	}
	if got := fencingPairs([]string{"b=9,c", "x+y z%"}, []int64{1, 2}); got != "b%3D9%2Cc=1,x%2By%20z%25=2" {
		t.Errorf("encoded keys: %q", got)
	}
}
