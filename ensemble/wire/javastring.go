package wire

import (
	"strings"
	"unicode/utf8"
)

// JavaString is what a Java jute server writes back for a string it read:
// ZooKeeper decodes a request's ustring with Java's UTF-8 decoder (every
// malformed subsequence becomes U+FFFD) and encodes a reply's ustring one
// UTF-16 code unit at a time, so a code point above U+FFFF goes out as its
// two surrogates, three bytes each (CESU-8), not as four bytes of UTF-8.
// Paths ZooKeeper validates can hold neither; a string it echoes without
// validation (sync's path) does, and a client compares what it gets back.
func JavaString(s string) string {
	if javaSafe(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + len(s)/2)
	for i := 0; i < len(s); {
		r, n := decodeJava(s[i:])
		i += n
		if r <= 0xFFFF {
			b.WriteRune(r)
			continue
		}
		r -= 0x10000
		writeUnit3(&b, 0xD800+(r>>10))
		writeUnit3(&b, 0xDC00+(r&0x3FF))
	}
	return b.String()
}

// javaSafe reports whether s comes back unchanged: valid UTF-8 without
// four-byte sequences.
func javaSafe(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0xF0 {
			return false
		}
	}
	return utf8.ValidString(s)
}

func writeUnit3(b *strings.Builder, c rune) {
	b.WriteByte(byte(0xE0 | c>>12))
	b.WriteByte(byte(0x80 | (c>>6)&0x3F))
	b.WriteByte(byte(0x80 | c&0x3F))
}

// decodeJava decodes the first code point of s as Java's UTF-8 decoder
// does: a malformed sequence yields one U+FFFD for its maximal subpart
// (the longest prefix that could have begun a valid sequence), and the
// byte that broke it starts the next one.
func decodeJava(s string) (rune, int) {
	c := s[0]
	if c < 0x80 {
		return rune(c), 1
	}
	var need int
	lo, hi := byte(0x80), byte(0xBF) // the second byte's range
	switch {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c == 0xED:
		need, hi = 2, 0x9F
	case c >= 0xE1 && c <= 0xEF:
		need = 2
	case c == 0xF0:
		need, lo = 3, 0x90
	case c == 0xF4:
		need, hi = 3, 0x8F
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	default:
		return utf8.RuneError, 1
	}
	for k := 1; k <= need; k++ {
		if k >= len(s) || s[k] < lo || s[k] > hi {
			return utf8.RuneError, k
		}
		lo, hi = 0x80, 0xBF
	}
	r, _ := utf8.DecodeRuneInString(s[:need+1])
	return r, need + 1
}
