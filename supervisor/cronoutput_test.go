package supervisor

import (
	"strings"
	"testing"
)

// The tail keeps exactly the last n bytes, across writes of every size.
func TestTail(t *testing.T) {
	var all strings.Builder
	tl := &tail{n: 10}
	for _, w := range []string{"abc", "", "defghij", "k", "lmnopqrstuvwxyz0123", "45", "6789abcdefghijkl"} {
		all.WriteString(w)
		if _, err := tl.Write([]byte(w)); err != nil {
			t.Fatal(err)
		}
		s := all.String()
		want := s[max(0, len(s)-10):]
		if got := tl.String(); got != want {
			t.Fatalf("after %q: tail %q, want %q", w, got, want)
		}
		if tl.Total() != int64(len(s)) {
			t.Fatalf("after %q: total %d, want %d", w, tl.Total(), len(s))
		}
	}
}
