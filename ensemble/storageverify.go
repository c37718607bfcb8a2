package ensemble

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc64"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// What a member checks of its data dir before raft reads it, file by
// file, and with what:
//
//   - raft.db, its structure: bbolt's own check (CheckStore): every page
//     reachable once, pages in order, the free list consistent, and the
//     meta pages' checksums. bbolt keeps no checksum of its data pages.
//   - raft.db, the log (verifyLog): every entry from the first index to
//     the last is present and decodes, and terms never fall. A torn or
//     truncated tail shows here or in bbolt's check.
//   - raft.db, the stable store (verifyLog): the current term is at least
//     the last entry's term and the term voted in. Its values carry no
//     checksum, so a flipped byte that raises a term passes; raft then
//     only holds one more election.
//   - the newest snapshot (checkSnapshot): meta.json parses, and state.bin
//     has the size and CRC-64 that hashicorp/raft wrote into meta.json.
//     raft itself would fall back to an older snapshot silently, behind
//     which the log may already be compacted.

// snapshotDirs are the finished snapshots under dir/snapshots, newest
// first (raft names them term-index-time).
func snapshotDirs(dir string) ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(dir, "snapshots"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() && !strings.HasSuffix(e.Name(), ".tmp") {
			out = append(out, filepath.Join(dir, "snapshots", e.Name()))
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(out)))
	return out, nil
}

// snapshotMeta is what hashicorp/raft's file snapshot store writes to
// meta.json: the snapshot's index and size, and the CRC-64 (ECMA) of
// state.bin.
type snapshotMeta struct {
	Index uint64
	Size  int64
	CRC   []byte
}

// checkSnapshot verifies the newest snapshot in the data dir.
func checkSnapshot(dir string) error {
	snaps, err := snapshotDirs(dir)
	if err != nil || len(snaps) == 0 {
		return err
	}
	newest := snaps[0]
	metaPath := filepath.Join(newest, "meta.json")
	b, err := os.ReadFile(metaPath)
	if err != nil {
		return &DamagedStoreError{File: metaPath, Err: err}
	}
	var meta snapshotMeta
	if err := json.Unmarshal(b, &meta); err != nil {
		return &DamagedStoreError{File: metaPath, Err: err}
	}
	statePath := filepath.Join(newest, "state.bin")
	f, err := os.Open(statePath)
	if err != nil {
		return &DamagedStoreError{File: statePath, Err: err}
	}
	defer f.Close()
	h := crc64.New(crc64.MakeTable(crc64.ECMA))
	n, err := io.Copy(h, f)
	if err != nil {
		return &DamagedStoreError{File: statePath, Err: err}
	}
	if n != meta.Size {
		return &DamagedStoreError{File: statePath, Err: fmt.Errorf("%d bytes, %s says %d", n, metaPath, meta.Size)}
	}
	if sum := h.Sum(nil); !bytes.Equal(sum, meta.CRC) {
		return &DamagedStoreError{File: statePath, Err: fmt.Errorf("CRC-64 %x, %s says %x", sum, metaPath, meta.CRC)}
	}
	return nil
}

// The stable store's keys, as hashicorp/raft names them.
var (
	keyCurrentTerm  = []byte("CurrentTerm")
	keyLastVoteTerm = []byte("LastVoteTerm")
)

// verifyLog reads every entry of the log in store (the file path) and
// checks it against the stable store.
func verifyLog(path string, logs raft.LogStore, stable raft.StableStore) error {
	damaged := func(format string, args ...any) error {
		return &DamagedStoreError{File: path, Err: fmt.Errorf(format, args...)}
	}
	first, err := logs.FirstIndex()
	if err != nil {
		return damaged("first log index: %v", err)
	}
	last, err := logs.LastIndex()
	if err != nil {
		return damaged("last log index: %v", err)
	}
	var term uint64
	if first > 0 {
		var l raft.Log
		for i := first; i <= last; i++ {
			if err := logs.GetLog(i, &l); err != nil {
				return damaged("log entry %d of %d..%d: %v", i, first, last, err)
			}
			if l.Index != i {
				return damaged("log entry %d says it is %d", i, l.Index)
			}
			if l.Term < term {
				return damaged("log entry %d has term %d after term %d", i, l.Term, term)
			}
			term = l.Term
		}
	}
	cur, err := stable.GetUint64(keyCurrentTerm)
	if err != nil && !errors.Is(err, raftboltdb.ErrKeyNotFound) {
		return damaged("current term: %v", err)
	}
	vote, err := stable.GetUint64(keyLastVoteTerm)
	if err != nil && !errors.Is(err, raftboltdb.ErrKeyNotFound) {
		return damaged("last vote term: %v", err)
	}
	if cur < term || cur < vote {
		return damaged("stable store's current term %d is below the log's last term %d or the term voted in %d", cur, term, vote)
	}
	return nil
}
