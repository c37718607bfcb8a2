package supervisor

import (
	"strings"
	"sync"
	"testing"
	"time"
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

// Each line reaches the journal whole and prefixed, however the writes
// cut it; a line past the bound is cut into prefixed pieces; an unended
// last line is flushed.
func TestPrefixer(t *testing.T) {
	cases := []struct {
		name   string
		max    int
		writes []string
		want   string
		cuts   int64
	}{
		{"lines", 80, []string{"a\nb\n"}, "j: a\nj: b\n", 0},
		{"split writes", 80, []string{"he", "llo\nwor", "ld\n"}, "j: hello\nj: world\n", 0},
		{"empty line", 80, []string{"\n\nx\n"}, "j: \nj: \nj: x\n", 0},
		{"unended last line", 80, []string{"a\npartial"}, "j: a\nj: partial\n", 0},
		{"long line cut", 4, []string{"abcdefghij\n"}, "j: abcd\nj: efgh\nj: ij\n", 2},
		{"long line across writes", 4, []string{"abc", "defg", "hi\n"}, "j: abcd\nj: efgh\nj: i\n", 2},
		{"exactly the bound", 4, []string{"abcd\nx\n"}, "j: abcd\nj: x\n", 0},
		{"exactly the bound, newline later", 4, []string{"abcd", "\nx\n"}, "j: abcd\nj: x\n", 0},
	}
	for _, c := range cases {
		var out strings.Builder
		p := newPrefixer(&out, "j: ", c.max)
		for _, w := range c.writes {
			if n, err := p.Write([]byte(w)); n != len(w) || err != nil {
				t.Fatalf("%s: Write(%q) = %d, %v", c.name, w, n, err)
			}
		}
		if err := p.Flush(); err != nil {
			t.Fatal(err)
		}
		if out.String() != c.want {
			t.Errorf("%s: got %q, want %q", c.name, out.String(), c.want)
		}
		if got := p.cuts.Load(); got != c.cuts {
			t.Errorf("%s: %d lines counted cut, want %d", c.name, got, c.cuts)
		}
	}
	if got := outputPrefix("backup", 1); got != "backup: " {
		t.Errorf("attempt 1 prefix %q", got)
	}
	if got := outputPrefix("backup", 2); got != "backup#2: " {
		t.Errorf("attempt 2 prefix %q", got)
	}
}

// A job's stdout and stderr reach their own streams, prefixed, and both
// the record's tail.
func TestCaptureKeepsStreamsApart(t *testing.T) {
	var stdout, stderr lockedBuffer
	c, err := newCapture(64, "j: ", &stdout, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.w[0].WriteString("out 1\nout 2"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.w[1].WriteString("err 1\n"); err != nil {
		t.Fatal(err)
	}
	kept, total := c.finish(10 * time.Second)
	if got := stdout.String(); got != "j: out 1\nj: out 2\n" {
		t.Errorf("stdout %q", got)
	}
	if got := stderr.String(); got != "j: err 1\n" {
		t.Errorf("stderr %q", got)
	}
	if total != 17 || !strings.Contains(kept, "out 1\nout 2") || !strings.Contains(kept, "err 1\n") {
		t.Errorf("kept %q (%d bytes), want both streams unprefixed, 17 bytes", kept, total)
	}
}

// lockedBuffer is a strings.Builder safe for the copying goroutines.
type lockedBuffer struct {
	mu sync.Mutex // guards b
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
