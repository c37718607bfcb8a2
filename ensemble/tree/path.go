package tree

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Paths of the nodes every tree starts with. ZooKeeper refuses to delete them
// ("special paths").
const (
	rootPath   = "/"
	procPath   = "/zookeeper"
	quotaPath  = "/zookeeper/quota"
	configPath = "/zookeeper/config"
)

func isSpecialPath(p string) bool {
	return p == rootPath || p == procPath || p == quotaPath || p == configPath
}

// ValidatePath applies ZooKeeper's PathUtils.validatePath rules. For a
// sequential create the rules are applied to path+"1", as ZooKeeper does,
// because the server appends the sequence number before the node exists; this
// is what allows a trailing "/" (e.g. "/locks/") in that case.
//
// ZooKeeper checks UTF-16 code units, so every code point above U+FFFF (a
// surrogate pair in Java) is rejected, and so is invalid UTF-8 (it decodes to
// U+FFFD, which lies in a forbidden range).
//
// The returned error wraps ErrBadArguments.
func ValidatePath(path string, sequential bool) error {
	if sequential {
		return validatePath(path + "1")
	}
	return validatePath(path)
}

// PathRune reports whether ZooKeeper's PathUtils accepts r beyond ASCII,
// or r as a character of a name when r is ASCII: no control characters,
// nothing from U+007F to U+009F, U+D800 to U+F8FF (surrogates and private
// use) or U+FFF0 up (a code point above U+FFFF is a surrogate pair in
// Java), and not the U+FFFD that invalid UTF-8 decodes to.
func PathRune(r rune) bool {
	return r > 0x1f && (r < 0x7f || r > 0x9f) && (r < 0xd800 || r > 0xf8ff) && r < 0xfff0
}

func validatePath(p string) error {
	if p == "" {
		return pathError(p, "path length must be > 0")
	}
	if p[0] != '/' {
		return pathError(p, "path must start with / character")
	}
	if len(p) == 1 {
		return nil
	}
	if p[len(p)-1] == '/' {
		return pathError(p, "path must not end with / character")
	}
	segStart := 1 // index of the first byte of the current segment
	for i := 1; i < len(p); {
		c := p[i]
		if c < utf8.RuneSelf {
			switch {
			case c == 0:
				return pathError(p, fmt.Sprintf("null character not allowed @%d", i))
			case c == '/':
				if i == segStart {
					return pathError(p, fmt.Sprintf("empty node name specified @%d", i))
				}
				if seg := p[segStart:i]; seg == "." || seg == ".." {
					return pathError(p, fmt.Sprintf("relative paths not allowed @%d", i-1))
				}
				segStart = i + 1
			case c <= 0x1f || c == 0x7f:
				return pathError(p, fmt.Sprintf("invalid character @%d", i))
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(p[i:])
		if !PathRune(r) {
			return pathError(p, fmt.Sprintf("invalid character @%d", i))
		}
		i += size
	}
	if seg := p[segStart:]; seg == "." || seg == ".." {
		return pathError(p, fmt.Sprintf("relative paths not allowed @%d", len(p)-1))
	}
	return nil
}

func pathError(p, reason string) error {
	return fmt.Errorf("%w: invalid path %q: %s", ErrBadArguments, p, reason)
}

// splitPath returns the parent path and the last segment of a validated,
// non-root path. The parent of a top-level node is "/".
func splitPath(p string) (parent, name string) {
	i := len(p) - 1
	for i > 0 && p[i] != '/' {
		i--
	}
	if i == 0 {
		return rootPath, p[1:]
	}
	return p[:i], p[i+1:]
}

// parentOf is ZooKeeper's parent of a path that may not be valid: what
// precedes its last slash, the root for a top-level path and for "/"
// itself (ZooKeeper's DataTree keeps the root under "" as well). ok is
// false where ZooKeeper refuses the path before any lookup: no slash, or a
// NUL.
func parentOf(p string) (parent string, ok bool) {
	i := strings.LastIndexByte(p, '/')
	if i < 0 || strings.IndexByte(p, 0) >= 0 {
		return "", false
	}
	if i == 0 {
		return rootPath, true
	}
	return p[:i], true
}

// joinPath is the inverse of splitPath.
func joinPath(parent, name string) string {
	if parent == rootPath {
		return "/" + name
	}
	return parent + "/" + name
}
