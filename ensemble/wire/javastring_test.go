package wire

import "testing"

func TestJavaString(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{in: "/b/plain", want: "/b/plain"},
		{in: "/b/日本", want: "/b/日本"},
		// U+1F600 is the pair D83D DE00 in Java, each written as 3 bytes.
		{in: "/b/\U0001F600", want: "/b/\xed\xa0\xbd\xed\xb8\x80"},
		{in: "\U00010000x", want: "\xed\xa0\x80\xed\xb0\x80x"},
		// Malformed input: one U+FFFD per maximal subpart.
		{in: "/\xff/", want: "/\uFFFD/"},
		{in: "/\xe6\x97/", want: "/\uFFFD/"},
		{in: "/\xf0\x9f\x98", want: "/\uFFFD"},
		{in: "/\xed\xa0\x80", want: "/\uFFFD\uFFFD\uFFFD"},
		{in: "/\xc0\xaf", want: "/\uFFFD\uFFFD"},
		{in: "\xe0\x80", want: "\uFFFD\uFFFD"},
	} {
		if got := JavaString(c.in); got != c.want {
			t.Errorf("JavaString(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
