package fencing

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

var (
	// ErrStaleToken is matched by a [*StaleTokenError]: the resource has
	// already accepted a newer holder of the lock.
	ErrStaleToken = errors.New("stale fencing token")
	// ErrCorruptState is matched by errors about a state file that exists
	// but does not hold valid marks. The guard never overwrites such a
	// file: forgetting a mark would let a stale holder through.
	ErrCorruptState = errors.New("corrupt fencing state")
	// ErrNoLock is returned for an empty lock name.
	ErrNoLock = errors.New("empty lock name")
)

// StaleTokenError is the rejection of a token below the lock's high-water
// mark. It matches [ErrStaleToken].
type StaleTokenError struct {
	Lock      string
	Token     Token // the token that was presented
	HighWater Token // the highest token the resource has accepted for Lock
}

func (e *StaleTokenError) Error() string {
	return fmt.Sprintf("stale fencing token %d for lock %s: resource already accepted %d", e.Token, e.Lock, e.HighWater)
}

// Is makes errors.Is(err, ErrStaleToken) hold.
func (e *StaleTokenError) Is(target error) bool { return target == ErrStaleToken }

// Guard is the high-water marks of one resource, one per lock, kept in a
// state file. A resource passes every write's token through [Guard.Accept]
// (or does the write inside [Guard.Do]) and refuses the write when it
// fails.
//
// A Guard is safe for concurrent use by many goroutines, and any number of
// Guards, in this process or in others, may share one state file:
// Accept and Do serialize on an exclusive flock(2) of the sibling file
// path+".lock", taken afresh by each call. The state file itself is never
// locked, because it is replaced by rename on every change and a lock on
// the replaced file would guard nothing; readers need no lock for the same
// reason. A change is durable when Accept returns: it is written to
// path+".tmp", fsynced, renamed over the state file, and the directory is
// fsynced.
type Guard struct {
	path string
}

// OpenGuard returns the guard kept in the state file at path. The file need
// not exist: a guard that has accepted nothing has no file, and the first
// Accept creates it. When it does exist it must hold valid marks, so that
// a wrong path or a damaged file shows up here rather than at the first
// write; the error then matches [ErrCorruptState]. The directory must
// exist and, for Accept, be writable.
func OpenGuard(path string) (*Guard, error) {
	if path == "" {
		return nil, errors.New("fencing: empty state file path")
	}
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("fencing state directory: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("fencing state directory %s: not a directory", dir)
	}
	if _, _, err := readState(path); err != nil {
		return nil, err
	}
	return &Guard{path: path}, nil
}

// Path returns the state file's path.
func (g *Guard) Path() string { return g.path }

// Accept admits a write by the holder of lock with token t, or refuses it.
// A token at or above the lock's mark is accepted (equal: the same run
// writes again) and a higher one becomes the new mark before Accept
// returns. A lower token gets a [*StaleTokenError] and leaves the mark as
// it is.
//
// Accept alone leaves a window: a writer frozen after Accept and before its
// write may write after a newer holder. Where the write can run in this
// process, use [Guard.Do] instead.
func (g *Guard) Accept(lock string, t Token) error {
	return g.Do(lock, t, nil)
}

// Do accepts t as [Guard.Accept] does and then, with the guard still
// locked, calls fn, so that no newer token can be accepted between the
// check and fn's write. The mark is raised before fn runs: if the process
// dies during fn, no write of t can sit behind a lower mark. When fn fails
// its error is returned and the mark stays raised, as t is still the
// lock's newest holder. fn may be nil.
//
// Every other Accept or Do on the same state file waits while fn runs;
// keep it short.
func (g *Guard) Do(lock string, t Token, fn func() error) error {
	if err := validate(lock, t); err != nil {
		return err
	}
	unlock, err := g.lock()
	if err != nil {
		return err
	}
	defer unlock()
	marks, _, err := readState(g.path)
	if err != nil {
		return err
	}
	hw, ok := marks[lock]
	if ok && t < hw {
		return &StaleTokenError{Lock: lock, Token: t, HighWater: hw}
	}
	if !ok || t > hw {
		marks[lock] = t
		if err := writeState(g.path, marks); err != nil {
			return err
		}
	}
	if fn != nil {
		return fn()
	}
	return nil
}

// Check reports whether Accept would accept t for lock at this moment,
// returning the same [*StaleTokenError] when it would not, but raises no
// mark and takes no lock. A newer holder may be accepted the moment after
// Check returns, so Check serves to fail early (before expensive work, or
// to tell a client it has lost the lock); the write itself must still go
// through Accept or Do.
func (g *Guard) Check(lock string, t Token) error {
	if err := validate(lock, t); err != nil {
		return err
	}
	hw, ok, err := g.HighWater(lock)
	if err != nil {
		return err
	}
	if ok && t < hw {
		return &StaleTokenError{Lock: lock, Token: t, HighWater: hw}
	}
	return nil
}

// HighWater returns the highest token accepted for lock; ok is false when
// the guard has accepted none for it.
func (g *Guard) HighWater(lock string) (t Token, ok bool, err error) {
	marks, _, err := readState(g.path)
	if err != nil {
		return 0, false, err
	}
	t, ok = marks[lock]
	return t, ok, nil
}

// Marks returns every lock's high-water mark. The map is the caller's.
func (g *Guard) Marks() (map[string]Token, error) {
	marks, _, err := readState(g.path)
	return marks, err
}

func validate(lock string, t Token) error {
	if lock == "" {
		return fmt.Errorf("fencing: %w", ErrNoLock)
	}
	if t < 0 {
		return fmt.Errorf("%w %d: negative", ErrInvalidToken, t)
	}
	return nil
}

// lock takes the exclusive flock on path+".lock". The lock file is opened
// read-only (flock needs no write access) and created when missing; it is
// never removed, since a process could hold a lock on a removed file while
// another locks its replacement.
func (g *Guard) lock() (unlock func(), err error) {
	name := g.path + ".lock"
	f, err := os.OpenFile(name, os.O_RDONLY|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("fencing lock: %w", err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("fencing lock: %w", &fs.PathError{Op: "flock", Path: name, Err: err})
	}
	// Closing the only descriptor of this open file releases the lock.
	return func() { f.Close() }, nil
}

// stateFile is the state file's JSON form: {"locks": {"nightly": 42}}.
type stateFile struct {
	Locks map[string]Token `json:"locks"`
}

// readState returns the marks in the state file, an empty map when there is
// no file yet.
func readState(path string) (marks map[string]Token, exists bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]Token{}, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("fencing state: %w", err)
	}
	marks, err = decodeState(b)
	if err != nil {
		return nil, true, fmt.Errorf("%w %s: %v", ErrCorruptState, path, err)
	}
	return marks, true, nil
}

// decodeState is strict: anything but one object with a "locks" object of
// non-negative integers is corrupt. Unknown fields are refused too, so that
// an older binary never rewrites a newer format and drops what it did not
// understand.
func decodeState(b []byte) (map[string]Token, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, errors.New("empty file")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var st stateFile
	if err := dec.Decode(&st); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("data after the JSON object")
	}
	if st.Locks == nil {
		return nil, errors.New(`no "locks" object`)
	}
	for lock, t := range st.Locks {
		if lock == "" {
			return nil, errors.New("empty lock name")
		}
		if t < 0 {
			return nil, fmt.Errorf("lock %q: negative mark %d", lock, t)
		}
	}
	return st.Locks, nil
}

// writeState replaces the state file durably. The caller holds the lock,
// so the fixed temporary name is the caller's alone; a leftover from a
// crash is removed first.
func writeState(path string, marks map[string]Token) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(stateFile{Locks: marks}); err != nil {
		return fmt.Errorf("fencing state: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("fencing state: %w", err)
	}
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("fencing state: %w", err)
	}
	err = func() error {
		// Keep the mode of the file being replaced, so an operator's
		// chmod survives the first write.
		if fi, err := os.Stat(path); err == nil {
			if err := f.Chmod(fi.Mode().Perm()); err != nil {
				return err
			}
		}
		if _, err := f.Write(buf.Bytes()); err != nil {
			return err
		}
		return f.Sync()
	}()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("fencing state: %w", err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return fmt.Errorf("fencing state: %w", err)
	}
	return nil
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
