package supervisor

import (
	"fmt"
	"strings"

	"github.com/coordrun/coordrun/ensemble/tree"
)

// Limits of the names coordrun puts into the store. A lock or job name
// becomes one znode name, a root a znode path; both travel in every
// record, log line and status row, and into the job's environment.
const (
	// maxNameBytes bounds a lock or job name: as a file name on most
	// filesystems, long enough for any name a person types, short enough
	// that a lock's paths stay small in every request.
	maxNameBytes = 255
	// maxRootBytes bounds a lock or cron root.
	maxRootBytes = 1024
)

// nameRule is what a name error says is allowed.
const nameRule = "a name is 1 to 255 bytes of printable characters up to U+FFFF, " +
	"without '/', and not '.' or '..'"

// checkName says what is wrong with s as the name of a lock or a cron job
// (kind), or nil. The characters are those ZooKeeper accepts in a path
// (no control characters, nothing ZooKeeper's PathUtils refuses), so that
// the same name works on every store.
func checkName(kind, s string) error {
	why := ""
	switch {
	case s == "":
		why = "it is empty"
	case len(s) > maxNameBytes:
		why = fmt.Sprintf("it is %d bytes long", len(s))
	case s == "." || s == "..":
		why = "it is a relative path"
	case strings.Contains(s, "/"):
		why = "it holds '/'"
	default:
		if i, r := badRune(s); i >= 0 {
			why = fmt.Sprintf("character %U at byte %d is not allowed", r, i)
		}
	}
	if why == "" {
		return nil
	}
	shown := s
	if len(shown) > 64 {
		shown = shown[:64] + "…"
	}
	return fmt.Errorf("bad %s name %q: %s; %s", kind, shown, why, nameRule)
}

// checkRoot says what is wrong with s as a root folder of locks or cron
// jobs (kind), or nil.
func checkRoot(kind, s string) error {
	if !strings.HasPrefix(s, "/") || (len(s) > 1 && strings.HasSuffix(s, "/")) {
		return fmt.Errorf("%s root %q must be an absolute znode path, as /coordrun/locks", kind, s)
	}
	if len(s) > maxRootBytes {
		return fmt.Errorf("%s root is %d bytes long; at most %d", kind, len(s), maxRootBytes)
	}
	if s == "/" {
		return nil
	}
	for _, part := range strings.Split(s[1:], "/") {
		if err := checkName(kind+" root's", part); err != nil {
			return err
		}
	}
	return nil
}

// badRune finds the first character ZooKeeper refuses in a path
// (tree.PathRune's rule, so that a name works on every store).
func badRune(s string) (int, rune) {
	for i, r := range s {
		if !tree.PathRune(r) {
			return i, r
		}
	}
	return -1, 0
}
