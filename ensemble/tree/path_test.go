package tree

import (
	"errors"
	"testing"
)

func TestValidatePath(t *testing.T) {
	cases := []struct {
		path string
		seq  bool
		ok   bool
	}{
		{"/", false, true},
		{"/a", false, true},
		{"/a/b/c", false, true},
		{"/a.b", false, true},
		{"/...", false, true},
		{"/a/.b", false, true},
		{"/a/b..", false, true},
		{"/zookeeper", false, true},
		{"/ünïcödé", false, true},
		{"/日本", false, true},
		{"/a b", false, true},
		{"/\u00a0", false, true},
		{"/\uf900", false, true},
		{"/\uffef", false, true},

		{"", false, false},
		{"a", false, false},
		{"a/b", false, false},
		{"/a/", false, false},
		{"//", false, false},
		{"//a", false, false},
		{"/a//b", false, false},
		{"/.", false, false},
		{"/..", false, false},
		{"/a/.", false, false},
		{"/a/..", false, false},
		{"/./a", false, false},
		{"/../a", false, false},
		{"/a/./b", false, false},
		{"/a\x00b", false, false},
		{"/a\x01", false, false},
		{"/a\x1f", false, false},
		{"/a\x7f", false, false},
		{"/a\u0080", false, false},
		{"/a\u009f", false, false},
		{"/a\ue000", false, false},
		{"/a\uf8ff", false, false},
		{"/a\ufff0", false, false},
		{"/a\uffff", false, false},
		{"/a\ufffd", false, false},
		{"/emoji😀", false, false}, // a surrogate pair in Java
		{"/bad\xffutf8", false, false},
		{"/tab\there", false, false},

		// Sequential: validated as path+"1".
		{"/locks/", true, true},
		{"/", true, true},
		{"/lock-", true, true},
		{"/a/.", true, true}, // "/a/.1"
		{"/a//", true, false},
		{"", true, false},
		{"x/", true, false},
		{"/a/", false, false},
	}
	for _, c := range cases {
		err := ValidatePath(c.path, c.seq)
		if c.ok && err != nil {
			t.Errorf("ValidatePath(%q, %v) = %v, want ok", c.path, c.seq, err)
		}
		if !c.ok {
			if err == nil {
				t.Errorf("ValidatePath(%q, %v) = nil, want error", c.path, c.seq)
			} else if !errors.Is(err, ErrBadArguments) {
				t.Errorf("ValidatePath(%q) error %v does not wrap ErrBadArguments", c.path, err)
			}
		}
	}
}

func TestSplitJoinPath(t *testing.T) {
	for _, c := range []struct{ path, parent, name string }{
		{"/a", "/", "a"},
		{"/a/b", "/a", "b"},
		{"/a/b/c", "/a/b", "c"},
	} {
		p, n := splitPath(c.path)
		if p != c.parent || n != c.name {
			t.Errorf("splitPath(%q) = %q, %q", c.path, p, n)
		}
		if j := joinPath(p, n); j != c.path {
			t.Errorf("joinPath(%q, %q) = %q", p, n, j)
		}
	}
}
