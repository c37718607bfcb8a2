package ensemble

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/coordrun/coordrun/ensemble/tree"
	"github.com/coordrun/coordrun/ensemble/zk"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/prometheus/client_golang/prometheus"
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
// with Close; all methods are safe for concurrent use. Its exported
// methods are all in this file.
type Member struct {
	cfg Config
	log *slog.Logger
	tr  tracker // every goroutine of the member; Close waits for them

	raft    *raft.Raft
	trans   *raft.NetworkTransport
	push    *commitPusher
	mux     *peerMux
	store   *raftboltdb.BoltStore
	storage *storageGuard // the data dir's disk-full alarm and fault handling (storage.go)
	fsm     *fsm
	prop    *proposer   // group commit, used while leading (group.go)
	gone    *leaderGone // a follower's early election when the leader's process died (leadergone.go)
	pool    peerPool
	health  *peerHealth          // which peers answer; the waiting line and status
	gate    *peerGate            // who may use the peer port (peergate.go)
	peer    map[byte]peerHandler // member RPCs served on the peer port

	watch *watchManager
	track *sessionTracker // session deadlines; only the leader's count
	relay *livenessRelay

	zkq *zkQuotaLog // ZooKeeper quotas passed by the writes taken here (zkquota.go)

	client       net.Listener
	adminSock    net.Listener // Config.AdminSocket's, or nil (adminsock.go)
	clients      *clientSet
	env          *connEnv
	clientAccept acceptState // the client port's accept loop; Live reads it
	perAddr      *addrLimit  // client connections per remote IP
	probes       selfProbes  // Live's own connections, which perAddr does not count
	bounds       limitStats  // what the bounds on clients refused

	stats   *requestStats
	metrics *metrics
	admin   *adminServer // nil unless Config.AdminAddr is set
	started time.Time    // when Start began, for the uptime in the status

	ctx    context.Context
	cancel context.CancelFunc
	ready  chan struct{} // closed once raft and the client port are up

	groupsAgreed atomic.Bool // leading, and every member reads group entries

	handshakes chan struct{} // one per session handshake in progress (clients.go)
}

// maxHandshakes bounds the session handshakes a member runs at once.
const maxHandshakes = 64

// Start opens (or creates) the member's data dir, joins the ensemble and
// starts serving clients. A new data dir bootstraps raft with cfg.Peers; an
// existing one resumes from disk and ignores cfg.Peers.
func Start(cfg Config) (*Member, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	// The client port is bound before the data dir is touched: a start
	// that fails on a busy port must not leave a bootstrapped raft store
	// behind, which a corrected start would then follow instead of its
	// flags. (The peer port is bound first thing in startRaft.)
	if cfg.ClientListener == nil {
		ln, err := net.Listen("tcp", cfg.ClientAddr)
		if err != nil {
			return nil, fmt.Errorf("client listener: %w", err)
		}
		cfg.ClientListener = ln
	}
	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		cfg.ClientListener.Close()
		return nil, fmt.Errorf("data dir: %w", err)
	}
	m := &Member{
		cfg:     cfg,
		log:     cfg.Logger.With("member", cfg.ID),
		fsm:     newFSM(),
		watch:   newWatchManager(),
		track:   newSessionTracker(time.Now),
		clients: newClientSet(),
		perAddr: newAddrLimit(cfg.MaxClientConns),
		stats:   newRequestStats(),
		ready:   make(chan struct{}),
		started: time.Now().UTC().Truncate(time.Millisecond),

		handshakes: make(chan struct{}, maxHandshakes),
	}
	m.zkq = newZKQuotaLog(m.log)
	m.ctx, m.cancel = context.WithCancel(context.Background())
	m.metrics = newMetrics(m.metricSources())
	m.fsm.afterApply = m.afterApply
	m.fsm.afterRestore = m.afterRestore
	m.relay = newLivenessRelay(m.sendTouch)
	m.peer = m.peerHandlers()
	m.env = &connEnv{
		host:       m,
		ctx:        m.ctx,
		log:        m.log,
		stats:      m.stats,
		tr:         &m.tr,
		bounds:     &m.bounds,
		limits:     zk.Limits{MaxData: cfg.MaxDataBytes, EnforceQuota: cfg.EnforceQuota},
		quota:      &treeQuota{maxNodes: cfg.MaxTreeNodes, maxBytes: cfg.MaxTreeBytes, counts: m.counts, log: m.log},
		maxFrame:   cfg.MaxDataBytes + 64<<10, // room for the path, ACLs and headers around the data
		minTimeout: cfg.MinSessionTimeout,
		maxTimeout: cfg.MaxSessionTimeout,
		identity:   cfg.ClientIdentity,
		admins:     admins{digest: cfg.SuperDigest, x509: cfg.SuperX509},
	}

	if err := m.startRaft(); err != nil {
		m.cancel()
		m.closeRaft()
		m.tr.Wait()
		cfg.ClientListener.Close()
		return nil, err
	}
	// The peer port's accept loop is known once raft runs.
	m.metrics.reg.MustRegister(m.bounds.collectors(map[string]*acceptState{"client": &m.clientAccept, "peer": &m.mux.accepts})...)
	m.client = clientListener(cfg.ClientListener, cfg.ClientTLS, m.log)
	if err := m.startAdmin(); err != nil {
		m.Close()
		return nil, err
	}
	if err := m.listenAdminSocket(); err != nil {
		m.Close()
		return nil, err
	}
	close(m.ready)
	m.tr.Go(m.acceptClients)
	if m.adminSock != nil {
		m.tr.Go(m.acceptAdminSocket)
	}
	m.tr.Go(m.expireLoop)
	m.tr.Go(m.idleLockLoop)
	m.tr.Go(func() {
		m.health.run(m.ctx, 100*time.Millisecond, func() raft.ServerID {
			_, id := m.raft.LeaderWithID()
			return id
		}, m.IsLeader)
	})
	m.tr.Go(m.groupGate)
	m.tr.Go(func() { m.relay.run(m.ctx, 50*time.Millisecond) })
	m.log.Info("member started", "client", cfg.ClientListener.Addr().String(), "peer", m.mux.Addr().String())
	return m, nil
}

// metricSources are the member's getters its metrics read.
func (m *Member) metricSources() metricSources {
	return metricSources{
		id:           m.cfg.ID,
		stats:        m.stats,
		counts:       m.counts,
		sessions:     m.track.count,
		watches:      m.watch.count,
		lastZxid:     m.fsm.lastZxid,
		raftState:    func() raft.RaftState { return m.raft.State() },
		term:         func() uint64 { return m.raft.CurrentTerm() },
		commitIndex:  func() uint64 { return m.raft.CommitIndex() },
		appliedIndex: func() uint64 { return m.raft.AppliedIndex() },
	}
}

// Close stops serving and shuts raft down, and returns once every
// goroutine of the member has ended. Acknowledged writes are on disk
// already; Close loses nothing. A leader first hands its leadership to
// the most caught-up follower (handOff), so that the ensemble takes
// writes again without waiting out an election timeout.
func (m *Member) Close() error {
	m.handOff()
	m.cancel()
	if m.client != nil {
		m.client.Close()
	}
	if m.adminSock != nil {
		m.adminSock.Close() // and removes the socket file
	}
	m.clients.close()
	m.admin.close()
	err := m.closeRaft()
	m.tr.Wait()
	return err
}

// ClientAddr is the address ZooKeeper clients connect to.
func (m *Member) ClientAddr() string { return m.client.Addr().String() }

// PeerAddr is the address of the peer port.
func (m *Member) PeerAddr() string { return m.mux.Addr().String() }

// ID is the member's raft server id.
func (m *Member) ID() string { return m.cfg.ID }

// InsecurePeers reports whether the member runs its peer port without
// authentication on an address beyond loopback (Config.InsecurePeers).
func (m *Member) InsecurePeers() bool {
	return m.cfg.PeerTLS == nil && m.cfg.PeerSecret == nil && !peersOnLoopback(m.cfg.PeerAddr, m.cfg.advertised())
}

// IsLeader reports whether this member currently leads.
func (m *Member) IsLeader() bool { return m.raft.State() == raft.Leader }

// LastZxid is the zxid of the last txn applied on this member.
func (m *Member) LastZxid() int64 { return m.fsm.lastZxid() }

// Waiting says what the member waits for while it knows no leader, such
// as "waiting for peers 2,3 (unreachable)"; "" once it knows one.
func (m *Member) Waiting() string { return m.health.Waiting() }

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

// EnsembleStatus asks every member in the raft configuration for its
// status; unreachable members are reported with an error.
func (m *Member) EnsembleStatus(ctx context.Context) Status { return m.ensembleStatus(ctx) }

// AdminAddr is the address the admin HTTP listener is bound to, or "" when
// it is off.
func (m *Member) AdminAddr() string {
	if m.admin == nil {
		return ""
	}
	return m.admin.ln.Addr().String()
}

// Metrics is the member's own Prometheus registry, for embedding programs
// that serve metrics themselves instead of through Config.AdminAddr.
func (m *Member) Metrics() prometheus.Gatherer { return m.metrics.reg }

// Ready reports why the member should not be sent clients yet, or nil: it
// must know a leader and be a leader or follower itself (not a candidate,
// not shut down). A member cut off from a quorum loses its leader within
// an election timeout and turns not ready.
func (m *Member) Ready() error {
	if m.ctx.Err() != nil {
		return ErrClosed
	}
	switch st := m.raft.State(); st {
	case raft.Leader, raft.Follower:
	default:
		return fmt.Errorf("raft state is %s", strings.ToLower(st.String()))
	}
	if addr, _ := m.raft.LeaderWithID(); addr == "" {
		return errors.New("no leader known")
	}
	return nil
}

// Live is a cheap check that the member still does its basic work, for
// the systemd watchdog and /healthz: both ports accept (neither accept
// loop is backing off on errors such as EMFILE), the client port answers
// ruok, and the state machine is not wedged (a view of it can be had
// before ctx ends). It says nothing about quorum; see Ready.
//
// With TLS on the client port the member cannot ask itself ruok (it may
// need a client certificate it does not have); then only its accept loop
// is checked.
func (m *Member) Live(ctx context.Context) error {
	if m.ctx.Err() != nil {
		return ErrClosed
	}
	// Both ports named when both fail: running out of descriptors
	// stops every accept loop at once.
	var stuck []error
	now := time.Now()
	if err := m.clientAccept.err(now); err != nil {
		stuck = append(stuck, fmt.Errorf("client port cannot accept: %w", err))
	}
	if err := m.mux.accepts.err(now); err != nil {
		stuck = append(stuck, fmt.Errorf("peer port cannot accept: %w", err))
	}
	if len(stuck) > 0 {
		return errors.Join(stuck...)
	}
	if m.cfg.ClientTLS == nil {
		if err := m.ruok(ctx); err != nil {
			return fmt.Errorf("client port: %w", err)
		}
	}
	// A wedged Apply holds the write lock forever; then this goroutine
	// stays blocked too, which is harmless next to a wedged member.
	viewed := make(chan struct{})
	m.tr.Go(func() {
		m.fsm.view(func(*tree.Tree, int64) {})
		close(viewed)
	})
	select {
	case <-viewed:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("state machine busy: %w", ctx.Err())
	}
}
