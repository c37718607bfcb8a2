package ensemble

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.etcd.io/bbolt"
)

// A bolt file cut below the pages its meta page counts is refused by its
// length, before bbolt maps the missing pages (reading them is a SIGBUS,
// which no check of the pages can report); the whole file passes.
func TestCheckStoreTruncated(t *testing.T) {
	path := filepath.Join(t.TempDir(), "raft.db")
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if err := db.Update(func(tx *bbolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("logs"))
			if err != nil {
				return err
			}
			return b.Put([]byte{byte(i)}, make([]byte, 4000))
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := CheckStore(path); err != nil {
		t.Fatalf("whole file: %v", err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, st.Size()/2); err != nil {
		t.Fatal(err)
	}
	err = checkStoreLength(path)
	if !errors.Is(err, ErrDamagedStore) || !strings.Contains(err.Error(), "truncated") {
		t.Fatalf("file cut to half: %v; want a damaged store, truncated", err)
	}
}
