package keys

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"unicode/utf8"
)

// MaxKeyLen is the longest key stored as is.
const MaxKeyLen = 256

// boundPrefixLen is how many leading bytes of a long key are kept.
const boundPrefixLen = 64

// hashMarker separates the kept prefix from the hash in a bounded key.
const hashMarker = "#sha256:"

// Bound returns key unchanged if len(key) <= MaxKeyLen, else its first 64
// bytes (cut back to a UTF-8 boundary) + "#sha256:" + the hex SHA-256 of
// the whole key, so keys stay bounded in Redis while distinct keys stay
// distinct. A short key that contains "#sha256:" is hashed as well, so no
// key kept as is can equal the bounded form of another key.
func Bound(key string) string {
	if len(key) <= MaxKeyLen && !strings.Contains(key, hashMarker) {
		return key
	}
	n := min(boundPrefixLen, len(key))
	// Back off to the start of a rune, at most UTFMax-1 bytes (keys need
	// not be valid UTF-8).
	for back := 0; n < len(key) && back < utf8.UTFMax-1 && n > 0 && !utf8.RuneStart(key[n]); back++ {
		n--
	}
	if n < len(key) && !utf8.RuneStart(key[n]) {
		n = min(boundPrefixLen, len(key))
	}
	sum := sha256.Sum256([]byte(key))
	return key[:n] + hashMarker + hex.EncodeToString(sum[:])
}
