package ensemble

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/coordrun/coordrun/ensemble/tree"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/hashicorp/raft"
)

// Membership changes and backups. Both are administrative: by default only
// clients on the member's own host (loopback) may ask for them, since a
// snapshot holds every znode regardless of ACLs and a reconfig can take
// the ensemble apart. Config.AdminFrom widens that.

// adminAllowed reports whether a client at remote may reconfigure the
// ensemble or read a snapshot.
func (m *Member) adminAllowed(remote net.Addr) bool {
	ap, err := netip.ParseAddrPort(remote.String())
	if err != nil {
		return false
	}
	addr := ap.Addr().Unmap()
	if addr.IsLoopback() {
		return true
	}
	for _, p := range m.cfg.AdminFrom {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// errBadChange: the change names something that cannot change.
var errBadChange = errors.New("bad membership change")

// memberChange is one reconfig request, parsed.
type memberChange struct {
	add    []Peer
	remove []string
}

// parseReconfig reads ZooKeeper's reconfig strings: joining servers as
// "server.<id>=<host>:<port>[:more][;client]" (the first host:port is the
// peer address), leaving servers as ids, both comma separated.
func parseReconfig(req *wire.ReconfigRequest) (memberChange, error) {
	var ch memberChange
	if req.NewMembers != "" {
		return ch, errors.New("non-incremental reconfig (newMembers) is not supported")
	}
	for _, s := range splitList(req.JoiningServers) {
		k, v, ok := strings.Cut(s, "=")
		id, found := strings.CutPrefix(k, "server.")
		if !ok || !found || id == "" {
			return ch, fmt.Errorf("joining server %q: want server.<id>=<host>:<port>", s)
		}
		v, _, _ = strings.Cut(v, ";")
		parts := strings.Split(v, ":")
		if len(parts) < 2 {
			return ch, fmt.Errorf("joining server %q: want server.<id>=<host>:<port>", s)
		}
		addr := net.JoinHostPort(parts[0], parts[1])
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return ch, fmt.Errorf("joining server %q: %w", s, err)
		}
		ch.add = append(ch.add, Peer{ID: id, Addr: addr})
	}
	for _, s := range splitList(req.LeavingServers) {
		ch.remove = append(ch.remove, strings.TrimPrefix(s, "server."))
	}
	if len(ch.add) == 0 && len(ch.remove) == 0 {
		return ch, errors.New("nothing to change")
	}
	return ch, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// changeMembers applies a membership change through raft on the leader.
// A new member must have been started with Config.Join (no bootstrap); it
// catches up by log or snapshot once added.
func (m *Member) changeMembers(ctx context.Context, ch memberChange) error {
	if !m.IsLeader() {
		addr, err := m.leaderAddr()
		if err != nil {
			return err
		}
		rc, err := m.pool.get(addr)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrNoLeader, err)
		}
		e := wire.NewEncoder(nil)
		e.Int(int32(len(ch.add)))
		for _, p := range ch.add {
			e.String(p.ID)
			e.String(p.Addr)
		}
		e.Strings(ch.remove)
		kind, payload, err := rc.call(ctx, rpcReconfig, e.Bytes())
		switch {
		case err != nil:
			return fmt.Errorf("%w: %v", ErrNoLeader, err)
		case kind == rpcBadChange:
			return fmt.Errorf("%w: %s", errBadChange, payload)
		case kind != rpcReconfig:
			return errors.New(rpcErrorText(kind, payload))
		}
		return nil
	}
	timeout := 10 * time.Second
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	for _, p := range ch.add {
		if err := m.raft.AddVoter(raft.ServerID(p.ID), raft.ServerAddress(p.Addr), 0, timeout).Error(); err != nil {
			return fmt.Errorf("add member %s: %w", p.ID, err)
		}
		m.log.Info("member added", "id", p.ID, "addr", p.Addr)
	}
	cf := m.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return err
	}
	for _, id := range ch.remove {
		known := false
		for _, srv := range cf.Configuration().Servers {
			known = known || string(srv.ID) == id
		}
		if !known {
			return fmt.Errorf("%w: %s is not a member", errBadChange, id)
		}
	}
	for _, id := range ch.remove {
		if err := m.raft.RemoveServer(raft.ServerID(id), 0, timeout).Error(); err != nil {
			return fmt.Errorf("remove member %s: %w", id, err)
		}
		m.log.Info("member removed", "id", id)
	}
	return nil
}

func decodeMemberChange(b []byte) (memberChange, error) {
	var ch memberChange
	d := wire.NewDecoder(b)
	n := d.Int()
	if n < 0 || int(n) > d.Remaining()/8 {
		return ch, wire.ErrMalformed
	}
	for i := int32(0); i < n; i++ {
		ch.add = append(ch.add, Peer{ID: d.String(), Addr: d.String()})
	}
	ch.remove = d.Strings()
	return ch, d.Err()
}

// configText renders the member set in ZooKeeper's dynamic-config form.
func (m *Member) configText() []byte {
	var b strings.Builder
	cf := m.raft.GetConfiguration()
	if cf.Error() != nil {
		return nil
	}
	for _, s := range cf.Configuration().Servers {
		role := "participant"
		if s.Suffrage != raft.Voter {
			role = "observer"
		}
		fmt.Fprintf(&b, "server.%s=%s:%s\n", s.ID, s.Address, role)
	}
	fmt.Fprintf(&b, "version=%x\n", cf.Index())
	return []byte(b.String())
}

// reconfigSlot answers opcode 16.
func (c *conn) reconfigSlot(xid int32, d *wire.Decoder) (slot, error) {
	var req wire.ReconfigRequest
	if err := req.Decode(d); err != nil {
		return slot{}, err
	}
	m := c.m
	return slot{finish: func() []byte {
		zxid := c.zxid()
		if !m.adminAllowed(c.nc.RemoteAddr()) {
			return errorReply(xid, zxid, wire.ErrReconfigDisabled)
		}
		ch, err := parseReconfig(&req)
		if err != nil {
			m.log.Info("bad reconfig", "remote", c.remote, "err", err)
			return errorReply(xid, zxid, wire.ErrBadArguments)
		}
		ctx, cancel := context.WithTimeout(m.ctx, 30*time.Second)
		defer cancel()
		if err := m.changeMembers(ctx, ch); err != nil {
			m.log.Warn("reconfig failed", "remote", c.remote, "err", err)
			code := wire.ErrNewConfigNoQuorum
			if errors.Is(err, errBadChange) {
				code = wire.ErrBadArguments
			}
			return errorReply(xid, zxid, code)
		}
		return reply(xid, c.zxid(), func(e *wire.Encoder) wire.Code {
			(&wire.GetDataResponse{Data: m.configText()}).Encode(e)
			return wire.OK
		})
	}}, nil
}

// snapshotWord is coordrun's own four-letter word that streams a snapshot
// of the tree: the applied zxid (8 bytes) followed by the tree's snapshot
// format. `coordrun ensemble snapshot save` reads it.
const snapshotWord = "snap"

// The snapshot includes every write committed before the request (the
// member first catches up as for a sync), so saving from a follower
// misses nothing acknowledged.
func (m *Member) streamSnapshot(w io.Writer) error {
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
	m.fsm.mu.RLock()
	t := m.fsm.tree.Clone()
	zxid := m.fsm.applied.Load()
	m.fsm.mu.RUnlock()
	var hdr [8]byte
	binary.BigEndian.PutUint64(hdr[:], uint64(zxid))
	if _, err := w.Write(hdr[:]); err != nil {
		return err
	}
	return t.WriteSnapshot(w)
}

// ReadBackup reads a snapshot saved by `coordrun ensemble snapshot save`,
// checking it whole, and returns its zxid and tree.
func ReadBackup(r io.Reader) (int64, *tree.Tree, error) {
	var hdr [8]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, fmt.Errorf("backup header: %w", err)
	}
	t, err := tree.ReadSnapshot(r)
	if err != nil {
		return 0, nil, fmt.Errorf("backup: %w", err)
	}
	return int64(binary.BigEndian.Uint64(hdr[:])), t, nil
}

// seedFromBackup writes a backup into a new data dir's snapshot store as
// the raft snapshot to start from, with the initial members as its
// configuration. Raft then starts from it instead of bootstrapping, on
// every member seeded from the same file alike. Its index is the backup's
// zxid, so zxids (and fencing tokens) keep rising past the backup's.
func seedFromBackup(file string, snaps raft.SnapshotStore, trans raft.Transport, peers []Peer) error {
	f, err := openBackup(file)
	if err != nil {
		return err
	}
	defer f.Close()
	zxid, t, err := ReadBackup(f)
	if err != nil {
		return err
	}
	var servers []raft.Server
	for _, p := range peers {
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.Addr)})
	}
	index := uint64(max(zxid, 1))
	sink, err := snaps.Create(1, index, 1, raft.Configuration{Servers: servers}, index, trans)
	if err != nil {
		return err
	}
	s := &fsmSnapshot{tree: t}
	binary.BigEndian.PutUint64(s.hdr[:], uint64(zxid))
	return s.Persist(sink)
}

func openBackup(file string) (io.ReadCloser, error) { return os.Open(file) }
