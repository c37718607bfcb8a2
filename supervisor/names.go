package supervisor

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"
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

// implicitName is the lock (or cron job) name of a command line given no
// --name: the command's base name, for people reading status, then '-'
// and the first 8 hex digits of the SHA-256 of the whole command line,
// so that unrelated commands never share a lock (python3 a.py and
// python3 b.py) while every host that runs the same command line, word
// for word, takes the same one. The argv words are hashed NUL-separated
// as given, not resolved: ./job.sh and /opt/job.sh are different locks.
// With --shell the script is one word, hashed after "sh -c", and the base
// name is its first word's. Characters other than letters, digits, '.',
// '_' and '-' in the base name become '_'.
func implicitName(argv []string, shell bool) string {
	words := argv
	cmd := argv[0]
	if shell {
		script := strings.Join(argv, " ")
		words = []string{"/bin/sh", "-c", script}
		if f := strings.Fields(script); len(f) > 0 {
			cmd = f[0]
		}
	}
	b := []byte(path.Base(cmd))
	for i, ch := range b {
		ok := ch == '.' || ch == '_' || ch == '-' || (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z')
		if !ok {
			b[i] = '_'
		}
	}
	base := strings.Trim(string(b), ".")
	if len(base) > implicitBaseBytes {
		base = base[:implicitBaseBytes]
	}
	if base == "" {
		base = "job"
	}
	sum := sha256.Sum256([]byte(strings.Join(words, "\x00")))
	return base + "-" + hex.EncodeToString(sum[:4])
}

// implicitBaseBytes keeps an implicit name readable in a status table and
// well under MaxNameBytes, whatever the command's file name.
const implicitBaseBytes = 64
