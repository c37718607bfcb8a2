// Package ensemble is one member of a coordrun ensemble: a ZooKeeper-style
// coordination service replicated with hashicorp/raft.
//
// A member owns the raft node (log and stable store in raft-boltdb, file
// snapshots), the FSM adapter over ensemble/tree, the ZooKeeper client
// listener, the watch manager, and — while it leads — the session tracker
// that alone expires sessions. Followers forward writes to the leader and
// relay session liveness to it.
package ensemble

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordrun/coordrun/ensemble/tree"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
)

// Errors a member returns to its callers.
var (
	// ErrNoLeader: no leader could be reached in time; the outcome of the
	// request is unknown only if it says so.
	ErrNoLeader = errors.New("ensemble has no reachable leader")
	// ErrUncertain: a write was handed to raft but its outcome was lost
	// with the leader; the client must be told the connection was lost.
	ErrUncertain = errors.New("write outcome unknown after leader change")
	// ErrClosed: the member is shutting down.
	ErrClosed = errors.New("member closed")
)

// Member is one running ensemble member. Start it with Start and stop it
// with Close; all methods are safe for concurrent use.
type Member struct {
	cfg    Config
	log    *slog.Logger
	raft   *raft.Raft
	trans  *raft.NetworkTransport
	push   *commitPusher
	mux    *peerMux
	store  *raftboltdb.BoltStore
	fsm    *fsm
	watch  *watchManager
	track  *sessionTracker
	relay  *livenessRelay
	pool   peerPool
	client net.Listener
	stats  serverStats

	metrics *metrics
	admin   *adminServer // nil unless Config.AdminAddr is set
	// acceptEnded: the client accept loop returned; Live fails from then on.
	acceptEnded atomic.Bool

	ctx    context.Context
	cancel context.CancelFunc
	ready  chan struct{} // closed once raft and the client port are up
	wg     sync.WaitGroup

	connMu sync.Mutex
	conns  map[*conn]struct{}
	bySess map[int64]*conn
}

// Start opens (or creates) the member's data dir, joins the ensemble and
// starts serving clients. A new data dir bootstraps raft with cfg.Peers; an
// existing one resumes from disk and ignores cfg.Peers.
func Start(cfg Config) (*Member, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	m := &Member{
		cfg:    cfg,
		log:    cfg.Logger.With("member", cfg.ID),
		fsm:    newFSM(),
		watch:  newWatchManager(),
		track:  newSessionTracker(time.Now),
		conns:  map[*conn]struct{}{},
		bySess: map[int64]*conn{},
		ready:  make(chan struct{}),
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	m.metrics = newMetrics(m)
	m.fsm.afterApply = m.afterApply
	m.fsm.afterRestore = m.afterRestore
	m.relay = newLivenessRelay(m.sendTouch)

	if err := m.startRaft(); err != nil {
		m.cancel()
		m.closeRaft()
		return nil, err
	}
	ln := cfg.ClientListener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", cfg.ClientAddr); err != nil {
			m.Close()
			return nil, fmt.Errorf("client listener: %w", err)
		}
	}
	m.client = clientListener(ln, cfg.ClientTLS, m.log)
	if err := m.startAdmin(); err != nil {
		m.Close()
		return nil, err
	}
	close(m.ready)
	m.wg.Add(3)
	go func() { defer m.wg.Done(); m.acceptClients() }()
	go func() { defer m.wg.Done(); m.expireLoop() }()
	go func() { defer m.wg.Done(); m.relay.run(m.ctx, 50*time.Millisecond) }()
	m.log.Info("member started", "client", ln.Addr().String(), "peer", m.mux.Addr().String())
	return m, nil
}

// logCacheSize is how many recent log entries stay in memory for
// replication: a few batches of MaxAppendEntries.
const logCacheSize = 2048

func (m *Member) startRaft() error {
	cfg := m.cfg
	ln := cfg.PeerListener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", cfg.PeerAddr); err != nil {
			return fmt.Errorf("peer listener: %w", err)
		}
	}
	pt := newPeerTLS(cfg.PeerTLS)
	m.mux = newPeerMux(pt.listener(ln, m.log), m.servePeer, m.log)
	m.mux.tls, m.pool.tls = pt, pt
	if len(cfg.Peers) == 0 {
		// A single member: it advertises where it actually listens.
		m.cfg.Peers = []Peer{{ID: cfg.ID, Addr: ln.Addr().String()}}
		cfg.Peers = m.cfg.Peers
	}
	adv, err := net.ResolveTCPAddr("tcp", cfg.advertised())
	if err != nil {
		return fmt.Errorf("peer address %q: %w", cfg.advertised(), err)
	}
	m.mux.adv = adv
	hlog := hclog.New(&hclog.LoggerOptions{Name: "raft", Level: hclog.Warn, Output: slogWriter{m.log}})
	m.trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  m.mux,
		MaxPool: 4,
		Timeout: 5 * time.Second,
		Logger:  hlog,
	})
	// bbolt locks its file; without a timeout a second member pointed at
	// the same data dir would wait for that lock forever.
	store, err := raftboltdb.New(raftboltdb.Options{
		Path:        filepath.Join(cfg.DataDir, "raft.db"),
		BoltOptions: &bbolt.Options{Timeout: 2 * time.Second},
	})
	if errors.Is(err, bbolt.ErrTimeout) {
		return fmt.Errorf("%w: data dir %s is in use by another process", ErrConfig, cfg.DataDir)
	}
	if err != nil {
		return fmt.Errorf("raft store: %w", err)
	}
	m.store = store
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.DataDir, 2, hlog)
	if err != nil {
		return fmt.Errorf("snapshot store: %w", err)
	}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.ID)
	rc.Logger = hlog
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	// The leader steps down once it has not heard from a quorum for this
	// long. Keeping it below the heartbeat timeout means a deposed leader
	// stops acting (extending leases, expiring sessions) before followers
	// can elect its successor.
	rc.LeaderLeaseTimeout = cfg.HeartbeatTimeout / 2
	// With nothing to replicate, raft tells followers the commit index
	// after this long (raft's default); the commit pusher normally has
	// already, so this is only the fallback.
	rc.CommitTimeout = 50 * time.Millisecond
	if cfg.commitTimeout > 0 {
		rc.CommitTimeout = cfg.commitTimeout
	}
	rc.MaxAppendEntries = 512
	rc.BatchApplyCh = true
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.SnapshotInterval = cfg.SnapshotInterval
	rc.TrailingLogs = 4096
	rc.NoLegacyTelemetry = true

	existing, err := raft.HasExistingState(store, store, snaps)
	if err != nil {
		return err
	}
	switch {
	case existing && cfg.Restore != "":
		return fmt.Errorf("%w: --restore needs an empty data dir; %s holds a member's state already", ErrConfig, cfg.DataDir)
	case !existing && cfg.Restore != "":
		if err := seedFromBackup(cfg.Restore, snaps, m.trans, cfg.Peers); err != nil {
			return fmt.Errorf("%w: restore %s: %w", ErrConfig, cfg.Restore, err)
		}
	case !existing && !cfg.Join:
		var servers []raft.Server
		for _, p := range cfg.Peers {
			servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.Addr)})
		}
		if err := raft.BootstrapCluster(rc, store, store, snaps, m.trans, raft.Configuration{Servers: servers}); err != nil {
			return fmt.Errorf("bootstrap: %w", err)
		}
	}
	m.push = newCommitPusher(m.trans)
	m.fsm.afterBatch = m.push.applied
	// The leader reads back every entry it replicates; from bolt that is
	// a read transaction and a msgpack decode per entry, most of its CPU
	// under load. Recent entries are kept in memory instead.
	logs, err := raft.NewLogCache(logCacheSize, m.metrics.timeLogStore(store))
	if err != nil {
		return fmt.Errorf("raft log cache: %w", err)
	}
	r, err := raft.NewRaft(rc, m.fsm, logs, store, snaps, &pushTransport{m.trans, m.push})
	if err != nil {
		return fmt.Errorf("raft: %w", err)
	}
	m.raft = r
	m.push.raft.Store(r)
	return nil
}

// ClientAddr is the address ZooKeeper clients connect to.
func (m *Member) ClientAddr() string { return m.client.Addr().String() }

// PeerAddr is the address of the peer port.
func (m *Member) PeerAddr() string { return m.mux.Addr().String() }

// ID is the member's raft server id.
func (m *Member) ID() string { return m.cfg.ID }

// IsLeader reports whether this member currently leads.
func (m *Member) IsLeader() bool { return m.raft.State() == raft.Leader }

// LastZxid is the zxid of the last txn applied on this member.
func (m *Member) LastZxid() int64 { return m.fsm.applied.Load() }

// WaitReady blocks until the ensemble has a leader that this member knows.
func (m *Member) WaitReady(ctx context.Context) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if addr, _ := m.raft.LeaderWithID(); addr != "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Close stops serving and shuts raft down. Acknowledged writes are on disk
// already; Close loses nothing.
func (m *Member) Close() error {
	m.cancel()
	if m.client != nil {
		m.client.Close()
	}
	m.connMu.Lock()
	for c := range m.conns {
		c.close()
	}
	m.connMu.Unlock()
	m.admin.close()
	m.wg.Wait()
	return m.closeRaft()
}

func (m *Member) closeRaft() error {
	var err error
	if m.raft != nil {
		err = m.raft.Shutdown().Error()
	}
	m.pool.closeAll()
	if m.push != nil {
		m.push.close()
	}
	if m.trans != nil {
		m.trans.Close()
	}
	if m.mux != nil {
		m.mux.Close()
	}
	if m.store != nil {
		if cerr := m.store.Close(); err == nil {
			err = cerr
		}
	}
	return err
}

// afterApply runs under the FSM's write lock for every committed txn.
func (m *Member) afterApply(txn *tree.Txn, res *tree.Result, zxid int64) {
	for _, ev := range res.Events {
		m.watch.trigger(ev, zxid)
	}
	switch txn.Kind {
	case tree.TxnCreateSession:
		if res.Err == nil {
			m.track.add(res.SessionID, time.Duration(txn.Timeout)*time.Millisecond)
		}
	case tree.TxnCloseSession:
		m.track.remove(txn.Session)
		m.connMu.Lock()
		c := m.bySess[txn.Session]
		m.connMu.Unlock()
		if c != nil && !c.selfClose.Load() {
			c.sessionEnded(zxid)
		}
	}
}

func (m *Member) afterRestore() {
	ids := map[int64]time.Duration{}
	for _, s := range m.fsm.tree.Sessions() {
		ids[s.ID] = time.Duration(s.Timeout) * time.Millisecond
	}
	m.track.reset(ids)
}

// expireLoop runs on every member but acts only while it leads.
func (m *Member) expireLoop() {
	t := time.NewTicker(25 * time.Millisecond)
	defer t.Stop()
	wasLeader := false
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-t.C:
		}
		leader := m.IsLeader()
		if leader && !wasLeader {
			m.track.refreshAll()
		}
		wasLeader = leader
		if !leader {
			continue
		}
		ids := m.track.expired()
		if len(ids) == 0 {
			continue
		}
		// Confirm leadership with a quorum before ending sessions: a
		// deposed leader must not expire a session its successor keeps.
		if err := m.raft.VerifyLeader().Error(); err != nil {
			for _, id := range ids {
				m.track.unmarkExpiring(id)
			}
			continue
		}
		for _, id := range ids {
			if !m.track.stillExpired(id) {
				continue
			}
			m.log.Info("session expired", "session", fmt.Sprintf("0x%x", id))
			id := id
			go func() {
				txn := &tree.Txn{Kind: tree.TxnCloseSession, Session: id}
				if _, err := m.proposeLocal(txn); err != nil {
					m.track.unmarkExpiring(id)
				}
			}()
		}
	}
}

// proposal is a write on its way through raft.
type proposal struct {
	index int64
	out   outcome
	err   error
}

// stamp fills in what only the leader decides: the time and, for a new
// session, its password.
func stamp(txn *tree.Txn) {
	txn.Time = time.Now().UnixMilli()
	if txn.Kind == tree.TxnCreateSession && len(txn.Password) == 0 {
		txn.Password = make([]byte, 16)
		_, _ = rand.Read(txn.Password)
	}
}

// proposeLocal proposes on this member as leader and waits.
func (m *Member) proposeLocal(txn *tree.Txn) (proposal, error) {
	f, err := m.applyAsLeader(txn)
	if err != nil {
		return proposal{}, err
	}
	return waitApply(f)
}

func (m *Member) applyAsLeader(txn *tree.Txn) (raft.ApplyFuture, error) {
	stamp(txn)
	data, err := txn.MarshalBinary()
	if err != nil {
		return nil, err
	}
	return m.raft.Apply(data, 0), nil
}

func waitApply(f raft.ApplyFuture) (proposal, error) {
	if err := f.Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) {
			return proposal{}, ErrNoLeader
		}
		return proposal{}, fmt.Errorf("%w: %v", ErrUncertain, err)
	}
	ar, ok := f.Response().(applyResult)
	if !ok {
		return proposal{}, fmt.Errorf("%w: no result", ErrUncertain)
	}
	if ar.err != nil {
		return proposal{}, ar.err
	}
	return proposal{index: ar.zxid, out: outcomeOf(&ar.res)}, nil
}

// submit hands a write to raft — directly when leading, else through the
// leader — and returns a function that waits for its outcome. Writes
// submitted in order by one goroutine are committed in that order.
func (m *Member) submit(txn *tree.Txn) func(ctx context.Context) proposal {
	if m.IsLeader() {
		f, err := m.applyAsLeader(txn)
		if err != nil {
			return func(context.Context) proposal { return proposal{err: err} }
		}
		return func(ctx context.Context) proposal {
			p, err := waitApply(f)
			p.err = err
			return p
		}
	}
	addr, err := m.leaderAddr()
	if err != nil {
		return func(context.Context) proposal { return proposal{err: err} }
	}
	rc, err := m.pool.get(addr)
	if err != nil {
		return func(context.Context) proposal { return proposal{err: fmt.Errorf("%w: %v", ErrNoLeader, err)} }
	}
	data, err := txn.MarshalBinary()
	if err != nil {
		return func(context.Context) proposal { return proposal{err: err} }
	}
	ch := rc.start(rpcPropose, data)
	return func(ctx context.Context) proposal {
		var r rpcResult
		select {
		case r = <-ch:
		case <-ctx.Done():
			return proposal{err: fmt.Errorf("%w: %v", ErrUncertain, ctx.Err())}
		}
		if r.err != nil {
			return proposal{err: fmt.Errorf("%w: %v", ErrUncertain, r.err)}
		}
		p, err := decodeProposeReply(r.kind, r.payload)
		if err != nil {
			return proposal{err: err}
		}
		// The write is committed but may not be applied here yet; the
		// caller decides whether its reply must wait for that.
		return p
	}
}

// leaderAddr waits up to an election's worth of time for a known leader.
func (m *Member) leaderAddr() (string, error) {
	deadline := time.Now().Add(4 * m.cfg.ElectionTimeout)
	for {
		addr, _ := m.raft.LeaderWithID()
		if addr != "" {
			return string(addr), nil
		}
		if time.Now().After(deadline) {
			return "", ErrNoLeader
		}
		select {
		case <-m.ctx.Done():
			return "", ErrClosed
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// readIndex returns a zxid this member must have applied before answering
// a sync: the leader's applied zxid after a barrier, which proves that it
// still leads (the barrier commits through a quorum) and that everything
// committed before the sync began is applied there.
func (m *Member) readIndex(ctx context.Context) (int64, error) {
	if m.IsLeader() {
		if err := m.raft.Barrier(5 * time.Second).Error(); err != nil {
			return 0, fmt.Errorf("%w: %v", ErrNoLeader, err)
		}
		return m.fsm.applied.Load(), nil
	}
	addr, err := m.leaderAddr()
	if err != nil {
		return 0, err
	}
	rc, err := m.pool.get(addr)
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrNoLeader, err)
	}
	kind, payload, err := rc.call(ctx, rpcReadIndex, nil)
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrNoLeader, err)
	}
	if kind != rpcReadIndex || len(payload) != 8 {
		return 0, fmt.Errorf("%w: %s", ErrNoLeader, rpcErrorText(kind, payload))
	}
	return int64(binary.BigEndian.Uint64(payload)), nil
}

// sendTouch relays session liveness to the leader (or records it here)
// and returns the sessions the leader does not consider alive.
func (m *Member) sendTouch(ctx context.Context, ids []int64) ([]int64, error) {
	if m.IsLeader() {
		var dead []int64
		for _, id := range ids {
			if !m.track.touch(id) {
				dead = append(dead, id)
			}
		}
		return dead, nil
	}
	addr, err := m.leaderAddr()
	if err != nil {
		return nil, err
	}
	rc, err := m.pool.get(addr)
	if err != nil {
		return nil, err
	}
	kind, resp, err := rc.call(ctx, rpcTouch, encodeIDs(ids))
	if err != nil {
		return nil, err
	}
	if kind != rpcTouch {
		return nil, errors.New(rpcErrorText(kind, resp))
	}
	return decodeIDs(resp), nil
}

func encodeIDs(ids []int64) []byte {
	b := make([]byte, 8*len(ids))
	for i, id := range ids {
		binary.BigEndian.PutUint64(b[8*i:], uint64(id))
	}
	return b
}

func decodeIDs(b []byte) []int64 {
	ids := make([]int64, 0, len(b)/8)
	for i := 0; i+8 <= len(b); i += 8 {
		ids = append(ids, int64(binary.BigEndian.Uint64(b[i:])))
	}
	return ids
}

// noteLive records that a client's session was heard from now and returns
// the relay generation a reply must wait for (0: no wait, this member
// leads and recorded it itself). A session the leader holds dead goes
// through the relay too, whose wait then reports it gone.
func (m *Member) noteLive(id int64) uint64 {
	if m.IsLeader() && m.track.touch(id) {
		return 0
	}
	return m.relay.note(id)
}

// servePeer answers member RPCs on the peer port.
func (m *Member) servePeer(c net.Conn) {
	// Peers may call before this member has finished starting.
	select {
	case <-m.ready:
	case <-m.ctx.Done():
		c.Close()
		return
	}
	serveRPC(c, func(kind byte, payload []byte) func() (byte, []byte) {
		switch kind {
		case rpcPropose:
			return m.handlePropose(payload)
		case rpcTouch:
			return func() (byte, []byte) {
				if !m.IsLeader() {
					return rpcError, []byte("not leader")
				}
				var dead []int64
				for _, id := range decodeIDs(payload) {
					if !m.track.touch(id) {
						dead = append(dead, id)
					}
				}
				return rpcTouch, encodeIDs(dead)
			}
		case rpcReadIndex:
			return func() (byte, []byte) {
				if !m.IsLeader() {
					return rpcError, []byte("not leader")
				}
				idx, err := m.readIndex(m.ctx)
				if err != nil {
					return rpcError, []byte(err.Error())
				}
				return rpcReadIndex, binary.BigEndian.AppendUint64(nil, uint64(idx))
			}
		case rpcStatus:
			return func() (byte, []byte) { return rpcStatus, m.localStatusJSON() }
		case rpcReconfig:
			return func() (byte, []byte) {
				ch, err := decodeMemberChange(payload)
				if err == nil && !m.IsLeader() {
					err = errors.New("not leader")
				}
				if err == nil {
					ctx, cancel := context.WithTimeout(m.ctx, 30*time.Second)
					err = m.changeMembers(ctx, ch)
					cancel()
				}
				if errors.Is(err, errBadChange) {
					return rpcBadChange, []byte(err.Error())
				}
				if err != nil {
					return rpcError, []byte(err.Error())
				}
				return rpcReconfig, nil
			}
		}
		return func() (byte, []byte) { return rpcError, []byte("unknown member rpc") }
	})
}

// handlePropose proposes a forwarded write. The raft.Apply happens before
// returning, on the connection's read loop, so forwarded writes from one
// follower connection commit in the order they were sent.
func (m *Member) handlePropose(payload []byte) func() (byte, []byte) {
	fail := func(msg string) func() (byte, []byte) {
		return func() (byte, []byte) { return rpcError, []byte(msg) }
	}
	var txn tree.Txn
	if err := txn.UnmarshalBinary(payload); err != nil {
		return fail("bad txn: " + err.Error())
	}
	if !m.IsLeader() {
		return fail("not leader")
	}
	if txn.Session != 0 {
		m.track.touch(txn.Session)
	}
	f, err := m.applyAsLeader(&txn)
	if err != nil {
		return fail(err.Error())
	}
	return func() (byte, []byte) {
		p, err := waitApply(f)
		if err != nil {
			return rpcError, []byte(err.Error())
		}
		e := wire.NewEncoder(nil)
		e.Long(p.index)
		p.out.encode(e)
		return rpcPropose, e.Bytes()
	}
}

func decodeProposeReply(kind byte, payload []byte) (proposal, error) {
	if kind != rpcPropose {
		return proposal{}, fmt.Errorf("%w: %s", ErrUncertain, rpcErrorText(kind, payload))
	}
	d := wire.NewDecoder(payload)
	p := proposal{index: d.Long()}
	if err := p.out.decode(d); err != nil {
		return proposal{}, fmt.Errorf("%w: bad propose reply: %v", ErrUncertain, err)
	}
	return p, nil
}

func rpcErrorText(kind byte, payload []byte) string {
	if kind == rpcError {
		return string(payload)
	}
	return fmt.Sprintf("unexpected member rpc reply %d", kind)
}

// slogWriter carries raft's hclog output into the member's slog logger.
type slogWriter struct{ log *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	w.log.Warn(string(trimNewline(p)))
	return len(p), nil
}

func trimNewline(p []byte) []byte {
	for len(p) > 0 && (p[len(p)-1] == '\n' || p[len(p)-1] == '\r') {
		p = p[:len(p)-1]
	}
	return p
}

var _ io.Writer = slogWriter{}
