package ensemble

import (
	"bufio"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/coordrun/coordrun/ensemble/tree"
	"github.com/hashicorp/raft"
)

// Backups: a snapshot of the tree streamed to an operator, and a new data
// dir seeded from one. Saving is administrative like a membership change
// (adminid.go): a snapshot holds every znode regardless of ACLs, so only
// the super user gets one, on the admin socket or over TLS with an
// administrator's client certificate.

// snapshotWord is coordrun's own four-letter word that streams a snapshot
// of the tree: the applied zxid (8 bytes) followed by the tree's snapshot
// format, without secrets (tree.WriteRedactedSnapshot): no digest hashes,
// no session passwords. `coordrun ensemble snapshot save` reads it.
// snapshotFullWord streams the snapshot with them (snapshot save
// --with-digests), for a backup that must restore every credential.
// Neither is subject to Config.FourLetterWords: both need the super user.
const (
	snapshotWord     = "snap"
	snapshotFullWord = "snpf"
)

// serveSnapshot answers snap (full: snpf) on a client connection: the
// snapshot, or one "error: " line.
func (m *Member) serveSnapshot(nc net.Conn, full bool) {
	if msg := m.snapshotRefusal(nc); msg != "" {
		_, _ = nc.Write([]byte(msg + "\n"))
		return
	}
	m.log.Info("serving a snapshot", "remote", nc.RemoteAddr().String(), "with_secrets", full)
	w := bufio.NewWriterSize(nc, 1<<20)
	_ = m.streamSnapshot(w, full)
	_ = w.Flush()
}

// The snapshot includes every write committed before the request (the
// member first catches up as for a sync), so saving from a follower
// misses nothing acknowledged.
func (m *Member) streamSnapshot(w io.Writer, full bool) error {
	ctx, cancel := context.WithTimeout(m.ctx, 30*time.Second)
	defer cancel()
	idx, err := m.readIndex(ctx)
	if err == nil {
		err = m.fsm.waitApplied(ctx, idx)
	}
	if err != nil {
		_, _ = fmt.Fprintf(w, "error: cannot catch up with the leader: %v\n", err)
		return err
	}
	s := m.fsm.clone()
	if _, err := w.Write(s.hdr.bytes()); err != nil {
		return err
	}
	if full {
		return s.tree.WriteSnapshot(w)
	}
	return s.tree.WriteRedactedSnapshot(w, unknownPassword)
}

// unknownPassword is a session password no client knows, for a redacted
// snapshot: as long as a real one, so that nothing tells the two apart.
func unknownPassword(int64) []byte {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return b
}

// ReadBackup reads a snapshot saved by `coordrun ensemble snapshot save`,
// checking it whole, and returns its zxid and tree.
func ReadBackup(r io.Reader) (int64, *tree.Tree, error) {
	hdr, t, err := readBackup(r)
	return hdr.zxid, t, err
}

func readBackup(r io.Reader) (snapHeader, *tree.Tree, error) {
	hdr, err := readSnapHeader(r)
	if err != nil {
		return snapHeader{}, nil, fmt.Errorf("backup header: %w", err)
	}
	t, err := tree.ReadSnapshot(r)
	if err != nil {
		return snapHeader{}, nil, fmt.Errorf("backup: %w", err)
	}
	return hdr, t, nil
}

// seedFromBackup writes a backup into a new data dir's snapshot store as
// the raft snapshot to start from, with the initial members as its
// configuration. Raft then starts from it instead of bootstrapping, on
// every member seeded from the same file alike. Its index is chosen so
// that the zxids of the entries after it (and fencing tokens) keep rising
// past the backup's: the backup's zxid itself, or for grouped zxids the
// index that zxid came from.
func seedFromBackup(file string, snaps raft.SnapshotStore, trans raft.Transport, peers []Peer, log *slog.Logger) error {
	f, err := openBackup(file)
	if err != nil {
		return err
	}
	defer f.Close()
	hdr, t, err := readBackup(f)
	if err != nil {
		return err
	}
	if n := t.RedactedDigests(); n > 0 {
		log.Warn("the backup was saved without digest hashes: its digest ACL entries (user:x) match no password until the super user sets them again with setACL; save with --with-digests to keep them",
			"entries", n, "backup", file)
	}
	index := uint64(max(hdr.zxid, 1))
	if hdr.grouped {
		index = uint64(hdr.zxid>>zxidShift) + 1
	}
	sink, err := snaps.Create(1, index, 1, raft.Configuration{Servers: voters(peers)}, index, trans)
	if err != nil {
		return err
	}
	s := &fsmSnapshot{hdr: hdr, tree: t}
	return s.Persist(sink)
}

func openBackup(file string) (io.ReadCloser, error) { return os.Open(file) }
