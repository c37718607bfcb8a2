package ensemble

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
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
	if err := checkStoreLength(path); err != nil {
		return err
	}
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

// Offsets in a bolt meta page (its 16-byte page header first): the magic,
// the page size, the high-water mark (pages in use) and the transaction.
const (
	boltMagic       = 0xED0CDAED
	boltMagicAt     = 16
	boltPageSizeAt  = 24
	boltHighWaterAt = 56
	boltTxidAt      = 64
	boltChecksumAt  = 72
	boltMetaLen     = 80
)

// checkStoreLength refuses a file shorter than the pages its newest meta
// page says are in use: bbolt maps them and would fault (SIGBUS) reading
// past the end, which no check of the pages can report.
func checkStoreLength(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return nil // bbolt.Open says why
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil
	}
	head := make([]byte, boltMetaLen)
	if _, err := f.ReadAt(head, 0); err != nil {
		return nil // too short for a meta page: bbolt.Open refuses it
	}
	pageSize := int64(binary.LittleEndian.Uint32(head[boltPageSizeAt:]))
	if binary.LittleEndian.Uint32(head[boltMagicAt:]) != boltMagic || pageSize < 512 || pageSize > 1<<20 {
		return nil // a damaged first meta page: bbolt.Open tries the second
	}
	var hwm, txid uint64
	for i := int64(0); i < 2; i++ {
		m := make([]byte, boltMetaLen)
		if _, err := f.ReadAt(m, i*pageSize); err != nil || binary.LittleEndian.Uint32(m[boltMagicAt:]) != boltMagic {
			continue
		}
		// A torn meta page fails its checksum (FNV-64a of the meta up
		// to the checksum); bbolt then uses the other, and so does this.
		h := fnv.New64a()
		h.Write(m[boltMagicAt:boltChecksumAt])
		if h.Sum64() != binary.LittleEndian.Uint64(m[boltChecksumAt:]) {
			continue
		}
		if t := binary.LittleEndian.Uint64(m[boltTxidAt:]); t >= txid {
			txid, hwm = t, binary.LittleEndian.Uint64(m[boltHighWaterAt:])
		}
	}
	if want := int64(hwm) * pageSize; hwm > 0 && st.Size() < want {
		return &DamagedStoreError{File: path, Err: fmt.Errorf("it is %d bytes, shorter than the %d pages of %d bytes its newest meta page counts in use: truncated", st.Size(), hwm, pageSize)}
	}
	return nil
}
