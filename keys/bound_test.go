package keys

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestBound(t *testing.T) {
	maxOut := boundPrefixLen + len(hashMarker) + 64
	short := []string{"", "/accounts/42", strings.Repeat("a", MaxKeyLen), strings.Repeat("\u00e9", MaxKeyLen/2)}
	for _, k := range short {
		if got := Bound(k); got != k {
			t.Errorf("Bound(len %d) changed a short key", len(k))
		}
	}
	long := []string{
		strings.Repeat("a", MaxKeyLen+1),
		strings.Repeat("a", 10000),
		strings.Repeat("a", 63) + strings.Repeat("\u20ac", 100), // rune straddles byte 64
		strings.Repeat("\xff", 300),                             // not UTF-8
		"short#sha256:" + strings.Repeat("0", 64),               // marker forces hashing
	}
	for _, k := range long {
		got := Bound(k)
		if got == k || len(got) > maxOut || !strings.Contains(got, hashMarker) {
			t.Errorf("Bound(len %d) = %q (len %d)", len(k), got, len(got))
		}
		if Bound(k) != got {
			t.Errorf("Bound not deterministic")
		}
		if utf8.ValidString(k) && !utf8.ValidString(got) {
			t.Errorf("Bound cut a rune: %q", got)
		}
	}
	if got := Bound(long[2]); !strings.HasPrefix(got, strings.Repeat("a", 63)+"#sha256:") {
		t.Errorf("prefix not cut back to rune boundary: %q", got)
	}
	// Same 64-byte prefix, different tails.
	p := strings.Repeat("p", 100)
	a, b := Bound(p+strings.Repeat("x", 300)), Bound(p+strings.Repeat("y", 300))
	if a == b {
		t.Error("distinct long keys with a common prefix collide")
	}
	if !strings.HasPrefix(a, p[:boundPrefixLen]+hashMarker) {
		t.Errorf("unexpected form %q", a)
	}
	// A short key spelled like a bounded key does not collide with it.
	if forged := a; Bound(forged) == a {
		t.Error("short key equal to a bounded form is stored as is")
	}
}
