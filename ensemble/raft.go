package ensemble

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/coordrun/coordrun/ensemble/tree"
	"github.com/coordrun/coordrun/ensemble/zk"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// The member's raft wiring: the peer port, the transport with its commit
// pusher, the bolt store and file snapshots, the FSM's callbacks, and
// proposing as the leader.

// logCacheSize is how many recent log entries stay in memory for
// replication: one batch of MaxAppendEntries, which a follower that keeps
// up never reads beyond (one further behind reads the store).
const logCacheSize = 512

func (m *Member) startRaft() error {
	cfg := m.cfg
	ln := cfg.PeerListener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", cfg.PeerAddr); err != nil {
			return fmt.Errorf("peer listener: %w", err)
		}
	}
	peerCfg := cfg.PeerTLS
	if cfg.PeerSecret != nil {
		var err error
		if peerCfg, err = secretTLSConfig(cfg.PeerSecret, cfg.ID, time.Now); err != nil {
			ln.Close()
			return err
		}
	}
	pt := newPeerTLS(peerCfg)
	m.gate = newPeerGate(m.log, m.metrics.reg, cfg.PeerSecret != nil)
	m.mux = newPeerMux(&m.tr, pt.listener(ln, m.log, m.gate), m.servePeer, m.log)
	m.mux.tls, m.mux.gate, m.pool.tls, m.pool.tr = pt, m.gate, pt, &m.tr
	m.logPeerAuth()
	if err := m.refuseDuplicateID(pt, ln.Addr()); err != nil {
		return err
	}
	explicitPeers := len(cfg.Peers) > 0
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
	m.gone = newLeaderGone(m)
	m.mux.raftEnded = m.gone.ended
	m.mux.start()
	hlog := newRaftLog(m.log)
	m.health = newPeerHealth(m.log)
	m.trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  m.mux,
		MaxPool: 4,
		Timeout: 5 * time.Second,
		Logger:  hlog,
	})
	store, snaps, err := m.openStorage(hlog)
	if err != nil {
		return err
	}
	rc := raftConfig(cfg, hlog)
	rc.TrailingLogs = cfg.TrailingLogs
	existing, err := raft.HasExistingState(store, store, snaps)
	if err != nil {
		return err
	}
	switch {
	case existing && cfg.Restore != "":
		return configError("Restore", "--restore needs an empty data dir; %s holds a member's state already", cfg.DataDir)
	case !existing && cfg.Restore != "":
		if err := seedFromBackup(cfg.Restore, snaps, m.trans, cfg.Peers, m.log); err != nil {
			return configError("Restore", "restore %s: %w", cfg.Restore, err)
		}
	case !existing && !cfg.Join:
		if err := raft.BootstrapCluster(rc, store, store, snaps, m.trans, raft.Configuration{Servers: voters(cfg.Peers)}); err != nil {
			return fmt.Errorf("bootstrap: %w", err)
		}
	}
	m.push = newCommitPusher(&m.tr, m.trans)
	m.fsm.afterBatch = m.push.applied
	// The leader reads back every entry it replicates; from bolt that is
	// a read transaction and a msgpack decode per entry, most of its CPU
	// under load. Recent entries are kept in memory instead.
	logs, err := raft.NewLogCache(logCacheSize, m.metrics.timeLogStore(store))
	if err != nil {
		return fmt.Errorf("raft log cache: %w", err)
	}
	trans := &healthTransport{pushTransport: &pushTransport{NetworkTransport: m.trans, push: m.push}, health: m.health}
	r, err := raft.NewRaft(rc, m.fsm, logs, store, snaps, trans)
	if err != nil {
		return fmt.Errorf("raft: %w", err)
	}
	if existing && explicitPeers {
		conf, err := storedMembership(r)
		if err == nil {
			err = checkPeersAgainstStore(conf, cfg.Peers, m.log)
		}
		if err != nil {
			_ = r.Shutdown().Error()
			return err
		}
	}
	m.raft = r
	m.gate.setRaft(r)
	m.push.raft.Store(r)
	m.prop = newProposer(r, m.stats.grouped)
	m.metrics.reg.MustRegister(m.gone.collectors()...)
	m.tr.Go(func() { m.gone.run(m.ctx) })
	m.tr.Go(func() { m.prop.runForm(m.ctx) })
	m.tr.Go(m.prop.runAnswer)
	return nil
}

// raftConfig is hashicorp/raft's configuration for the member.
func raftConfig(cfg Config, hlog hclog.Logger) *raft.Config {
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
	return rc
}

// voters is the raft configuration of the initial members.
func voters(peers []Peer) []raft.Server {
	servers := make([]raft.Server, 0, len(peers))
	for _, p := range peers {
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.Addr)})
	}
	return servers
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

// afterApply runs under the FSM's write lock for every committed txn, and
// for every committed configuration (txn nil).
func (m *Member) afterApply(txn *tree.Txn, res *tree.Result, zxid int64) {
	for _, ev := range res.Events {
		m.watch.trigger(ev, zxid)
	}
	if txn == nil {
		return
	}
	if len(res.Quotas) > 0 && m.clients.bySession(txn.Session) != nil {
		// The member that took the write says so, as ZooKeeper's
		// leader does for the writes it prepares.
		m.zkq.note(res.Quotas)
	}
	switch txn.Kind {
	case tree.TxnCreateSession:
		if res.Err == nil {
			m.track.add(res.SessionID, time.Duration(txn.Timeout)*time.Millisecond)
		}
	case tree.TxnCloseSession:
		m.track.remove(txn.Session)
		if c := m.clients.bySession(txn.Session); c != nil && !c.selfClose.Load() {
			c.sessionEnded()
		}
	}
}

// afterRestore runs under the FSM's write lock once a snapshot replaced
// the tree with t.
func (m *Member) afterRestore(t *tree.Tree) {
	ids := map[int64]time.Duration{}
	for _, s := range t.Sessions() {
		ids[s.ID] = time.Duration(s.Timeout) * time.Millisecond
	}
	m.track.reset(ids)
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
	return m.waitApply(f)
}

// handOff transfers leadership to the most caught-up follower, if this
// member leads and has one, and waits until the others know the new
// leader. Best effort: a transfer that fails (no follower answers within
// an election timeout) leaves the election to the followers' timers, as a
// crash would.
func (m *Member) handOff() {
	if m.raft == nil || m.raft.State() != raft.Leader {
		return
	}
	cf := m.raft.GetConfiguration()
	if cf.Error() != nil {
		return
	}
	others := 0
	for _, s := range cf.Configuration().Servers {
		if s.Suffrage == raft.Voter && s.ID != raft.ServerID(m.cfg.ID) {
			others++
		}
	}
	if others == 0 {
		return
	}
	// The new leader's first heartbeat tells this member who it is.
	leaders := make(chan raft.Observation, 4)
	obs := raft.NewObserver(leaders, false, func(o *raft.Observation) bool {
		l, ok := o.Data.(raft.LeaderObservation)
		return ok && l.LeaderID != "" && l.LeaderID != raft.ServerID(m.cfg.ID)
	})
	m.raft.RegisterObserver(obs)
	defer m.raft.DeregisterObserver(obs)
	start := time.Now()
	if err := m.raft.LeadershipTransfer().Error(); err != nil {
		m.log.Warn("leadership transfer before stopping failed", "err", err)
		return
	}
	to := "unknown yet"
	if _, id := m.raft.LeaderWithID(); id != "" && id != raft.ServerID(m.cfg.ID) {
		to = string(id)
	} else {
		t := time.NewTimer(2 * m.cfg.ElectionTimeout)
		defer t.Stop()
		select {
		case o := <-leaders:
			to = string(o.Data.(raft.LeaderObservation).LeaderID)
		case <-t.C:
		}
	}
	m.log.Info("leadership handed over before stopping", "to", to, "took", time.Since(start).Round(time.Millisecond))
}

// leaderApply is a txn handed to raft on the leader, directly (f) or
// through the group proposer (q), and when.
type leaderApply struct {
	f        raft.ApplyFuture
	q        *queuedTxn
	proposed time.Time
}

func (m *Member) applyAsLeader(txn *tree.Txn) (leaderApply, error) {
	stamp(txn)
	data, err := txn.MarshalBinary()
	if err != nil {
		return leaderApply{}, err
	}
	proposed := time.Now()
	if m.grouping() {
		q, err := m.prop.propose(m.ctx, data)
		if err != nil {
			return leaderApply{}, err
		}
		return leaderApply{q: q, proposed: proposed}, nil
	}
	return leaderApply{f: m.raft.Apply(data, 0), proposed: proposed}, nil
}

// waitApply waits for a txn proposed here to be applied here, and records
// how long raft took to commit it and the tree to apply it.
func (m *Member) waitApply(a leaderApply) (proposal, error) {
	var ar applyResult
	var err error
	if a.q != nil {
		ar, err = a.q.wait(m.ctx)
	} else if err = a.f.Error(); err == nil {
		var ok bool
		if ar, ok = a.f.Response().(applyResult); !ok {
			return proposal{}, fmt.Errorf("%w: no result", ErrUncertain)
		}
	}
	switch {
	case errors.Is(err, ErrClosed):
		return proposal{}, fmt.Errorf("%w: member closing", ErrUncertain)
	case errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return proposal{}, ErrNoLeader
	case err != nil:
		return proposal{}, fmt.Errorf("%w: %v", ErrUncertain, err)
	case ar.err != nil:
		return proposal{}, ar.err
	}
	m.stats.stage(stageCommit, ar.started.Sub(a.proposed))
	m.stats.stage(stageApply, ar.done.Sub(ar.started))
	return proposal{index: ar.zxid, out: zk.OutcomeOf(&ar.res), ready: ar.done}, nil
}
