package ensemble

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/coordrun/coordrun/ensemble/tree"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/ensemble/zk"
	"github.com/hashicorp/raft"
)

// Membership changes. Like backups (backup.go) they are administrative:
// only the super user may ask for them (adminid.go), since a reconfig can
// take the ensemble apart. Over TCP the client must also be on the
// member's own host (loopback) or in Config.AdminFrom.

// adminAllowed reports whether remote is an address administrative
// requests over TCP may come from; it is a network restriction on top of
// the identity adminid.go checks, never enough alone.
func (m *Member) adminAllowed(remote net.Addr) bool {
	ap, err := netip.ParseAddrPort(remote.String())
	if err != nil {
		return false
	}
	return m.adminAllowedAddr(ap.Addr())
}

// adminAllowedAddr is adminAllowed for a client's address.
func (m *Member) adminAllowedAddr(addr netip.Addr) bool {
	addr = addr.Unmap()
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
	_, err := leaderCall(m, rpcReconfig,
		func() ([]byte, error) { return encodeMemberChange(ch), nil },
		func() pending[struct{}] {
			return func(ctx context.Context) (struct{}, error) { return struct{}{}, m.applyChange(ctx, ch) }
		}, nil)(ctx)
	return err
}

// applyChange makes a membership change as the leader.
func (m *Member) applyChange(ctx context.Context, ch memberChange) error {
	timeout := 10 * time.Second
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	for _, p := range ch.add {
		if err := m.sameEnsemble(p.Addr); err != nil {
			return fmt.Errorf("%w: member %s at %s %v", errBadChange, p.ID, p.Addr, err)
		}
		// A member that cannot read group entries would skip them and
		// drift apart from the others. One not reachable yet is added
		// anyway, as before: it learns the log once it starts.
		if m.grouping() && errors.Is(m.readsGroups(ctx, p.Addr), errOldMember) {
			return fmt.Errorf("%w: member %s %v; upgrade it before adding it", errBadChange, p.ID, errOldMember)
		}
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

func encodeMemberChange(ch memberChange) []byte {
	e := wire.NewEncoder(nil)
	e.Int(int32(len(ch.add)))
	for _, p := range ch.add {
		e.String(p.ID)
		e.String(p.Addr)
	}
	e.Strings(ch.remove)
	return e.Bytes()
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

// configData is /zookeeper/config as this member has applied it: the
// membership last committed, in ZooKeeper's form (empty on a lone member).
func (m *Member) configData() ([]byte, wire.Stat) {
	var data []byte
	var st tree.Stat
	m.fsm.view(func(t *tree.Tree, _ int64) {
		// The node is world-readable and cannot be deleted.
		data, st, _ = t.Get("/zookeeper/config", nil)
	})
	return data, zk.StatOf(st)
}

// zkConfigText renders servers in ZooKeeper's dynamic-configuration form,
// as ZooKeeper's quorum verifier prints it: a line
// "server.<id>=<host>:<port>:0:<role>" each, in id order (numeric ids by
// value), with the raft address as the quorum address and no election
// port (0: ZooKeeper's parser, which Curator uses, refuses an election
// port equal to the quorum port), and "version=<hex>" without a final
// newline. Client addresses are left out, as ZooKeeper does for a static
// configuration, so a client that follows the configuration (Curator's
// EnsembleTracker) keeps the connect string it was given.
func zkConfigText(servers []raft.Server, version int64) []byte {
	servers = slices.Clone(servers)
	slices.SortFunc(servers, func(a, b raft.Server) int {
		x, errA := strconv.ParseUint(string(a.ID), 10, 64)
		y, errB := strconv.ParseUint(string(b.ID), 10, 64)
		if errA == nil && errB == nil {
			return cmp.Compare(x, y)
		}
		return cmp.Compare(a.ID, b.ID)
	})
	var b strings.Builder
	for _, s := range servers {
		role := "participant"
		if s.Suffrage != raft.Voter {
			role = "observer"
		}
		host, port, err := net.SplitHostPort(string(s.Address))
		if err != nil {
			fmt.Fprintf(&b, "server.%s=%s:%s\n", s.ID, s.Address, role)
			continue
		}
		if strings.Contains(host, ":") {
			host = "[" + host + "]"
		}
		fmt.Fprintf(&b, "server.%s=%s:%s:0:%s\n", s.ID, host, port, role)
	}
	fmt.Fprintf(&b, "version=%x", version)
	return []byte(b.String())
}

// reconfig serves a client's reconfig request (opcode 16) from remote,
// read with the identities auth, and returns the new configuration with
// its stat, or the error code to answer with.
func (m *Member) reconfig(ctx context.Context, remote net.Addr, auth []tree.Identity, req *wire.ReconfigRequest) ([]byte, wire.Stat, wire.Code) {
	if code := m.reconfigRefusal(remote, auth); code != wire.OK {
		return nil, wire.Stat{}, code
	}
	ch, err := parseReconfig(req)
	if err != nil {
		m.log.Info("bad reconfig", "remote", remote.String(), "err", err)
		return nil, wire.Stat{}, wire.ErrBadArguments
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := m.changeMembers(ctx, ch); err != nil {
		m.log.Warn("reconfig failed", "remote", remote.String(), "err", err)
		if errors.Is(err, errBadChange) {
			return nil, wire.Stat{}, wire.ErrBadArguments
		}
		return nil, wire.Stat{}, wire.ErrNewConfigNoQuorum
	}
	// As ZooKeeper, answer with /zookeeper/config holding the new
	// configuration: once this member has applied it.
	idx, err := m.readIndex(ctx)
	if err == nil {
		err = m.fsm.waitApplied(ctx, idx)
	}
	if err != nil {
		m.log.Warn("reconfig committed, but this member did not catch up", "remote", remote.String(), "err", err)
		return nil, wire.Stat{}, wire.ErrConnectionLoss
	}
	data, st := m.configData()
	return data, st, wire.OK
}
