package ensemble

import (
	"errors"
	"fmt"
	"os"
	"time"

	"go.etcd.io/bbolt"
)

// ErrDamagedStore is returned by Start when a file of the data dir fails
// its check. The member serves nothing from it: it would otherwise answer
// reads from a tree that differs from the others' or panic later, deep in
// the storage engine, naming no file.
var ErrDamagedStore = errors.New("damaged data file")

// DamagedStoreError names the damaged file and what was wrong with it;
// errors.Is matches ErrDamagedStore.
type DamagedStoreError struct {
	File string
	Err  error
}

func (e *DamagedStoreError) Error() string {
	return fmt.Sprintf("%s is damaged (%v); this member will not start from it. "+
		"Repair: move the data dir aside, remove the member from the ensemble "+
		"(coordrun ensemble remove ID on a healthy member), start it again with an empty data dir "+
		"and --join, then add it back (coordrun ensemble add ID PEER-ADDR): it fetches a snapshot "+
		"from the leader", e.File, e.Err)
}

func (e *DamagedStoreError) Unwrap() error { return e.Err }

func (e *DamagedStoreError) Is(target error) bool { return target == ErrDamagedStore }

// CheckStore verifies the structure of the bolt file at path before raft
// opens it: every page reachable once and only once, branch and leaf
// pages in order, the free list consistent with them. bbolt's meta pages
// carry a checksum; its data pages carry none, so a flipped byte inside a
// value is not seen here (raft then fails to decode that entry). A file
// that does not exist yet passes, and so does one another process holds
// (the member's own open then says the data dir is in use).
//
// Some damage makes bbolt panic on a goroutine of its own, which no
// recover here can catch: a member started by `coordrun server` runs this
// check in a child process (Config.StoreCheck) so that such a panic is
// reported as this file's damage.
func CheckStore(path string) (err error) {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	// A damaged file can make bbolt panic rather than fail; that panic is
	// this file's error, not the process's end.
	defer func() {
		if r := recover(); r != nil {
			err = &DamagedStoreError{File: path, Err: fmt.Errorf("%v", r)}
		}
	}()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: 2 * time.Second})
	if errors.Is(err, bbolt.ErrTimeout) {
		return nil
	}
	if err != nil {
		return &DamagedStoreError{File: path, Err: err}
	}
	defer db.Close()
	return db.View(func(tx *bbolt.Tx) error {
		// Read the checker to its end: it walks the file on a goroutine of
		// its own inside this transaction. The first few faults say enough.
		var errs []error
		for e := range tx.Check() {
			if len(errs) < 3 {
				errs = append(errs, e)
			}
		}
		if len(errs) > 0 {
			return &DamagedStoreError{File: path, Err: errors.Join(errs...)}
		}
		return nil
	})
}
