package ensemble

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
)

// A leader whose process died is noticed by raft only when its heartbeats
// have been missing for one to two heartbeat timeouts. The kernel closes a
// dead process's connections at once, though, and its port then refuses
// new ones: that is how ZooKeeper's followers notice a lost leader within
// milliseconds. A follower here does the same: when one of raft's
// connections ends, it dials the leader's peer port, and if the port
// refuses it, it shortens its own heartbeat and election timeouts to the
// leader lease for the election that follows, then restores them once a
// leader is known again.
//
// The lease is the floor: raft refuses a heartbeat timeout below it
// (ValidateConfig), and it keeps its meaning: a leader cut off from a
// majority steps down after the lease, before a follower shortened to
// the lease can have elected a successor. A leader that is alive but
// unreachable keeps its port open, or at least does not refuse: nothing
// changes for it. A firewall that rejects with a TCP reset does make a
// live leader refuse; then a follower may turn candidate about when the
// leader steps down (both one lease after their last contact). Writes
// stay safe (raft), and a liveness the deposed leader acknowledged in
// that instant gives the client no lease past the successor's: the
// successor grants every session a full timeout from its term's start,
// and a client's lease is shortened by its drift margin (250 ms by
// default), more than that instant.

// leaderProbeTimeout bounds the dial to a leader whose connection ended.
// A refusal comes back at once; anything slower is not a dead process.
const leaderProbeTimeout = 250 * time.Millisecond

// leaderGone is a follower's watch for a dead leader.
type leaderGone struct {
	m    *Member
	kick chan struct{} // one of raft's connections ended
	// dial probes the leader's peer port; tests replace it.
	dial atomic.Pointer[func(ctx context.Context, addr string) error]

	early atomic.Int64 // elections started early
}

func newLeaderGone(m *Member) *leaderGone {
	g := &leaderGone{m: m, kick: make(chan struct{}, 1)}
	dial := func(ctx context.Context, addr string) error {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			c.Close()
		}
		return err
	}
	g.dial.Store(&dial)
	return g
}

// ended is called when one of raft's accepted connections ends.
func (g *leaderGone) ended() {
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// run serves kicks until ctx ends.
func (g *leaderGone) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-g.kick:
		}
		r := g.m.raft
		if r.State() != raft.Follower {
			continue
		}
		addr, _ := r.LeaderWithID()
		if addr == "" {
			continue // raft already looks for a new leader
		}
		pctx, cancel := context.WithTimeout(ctx, leaderProbeTimeout)
		err := (*g.dial.Load())(pctx, string(addr))
		cancel()
		if !errors.Is(err, syscall.ECONNREFUSED) {
			continue
		}
		g.electEarly(ctx, r, addr)
	}
}

// electEarly shortens raft's timeouts to the lease until a leader other
// than dead is known (or this member leads), or until the configured
// election time has passed twice, then restores them.
func (g *leaderGone) electEarly(ctx context.Context, r *raft.Raft, dead raft.ServerAddress) {
	cfg := g.m.cfg
	short := r.ReloadableConfig()
	short.HeartbeatTimeout = cfg.HeartbeatTimeout / 2 // raftConfig's lease
	short.ElectionTimeout = short.HeartbeatTimeout
	if err := r.ReloadConfig(short); err != nil {
		g.m.log.Warn("leader gone: could not shorten the election timeout", "err", err)
		return
	}
	g.early.Add(1)
	g.m.log.Info("leader's peer port refuses connections: electing a new leader early", "leader", string(dead))
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	give := time.After(2 * (cfg.HeartbeatTimeout + cfg.ElectionTimeout))
wait:
	for {
		select {
		case <-ctx.Done():
			break wait
		case <-give:
			break wait
		case <-t.C:
			if addr, _ := r.LeaderWithID(); (addr != "" && addr != dead) || r.State() == raft.Leader {
				break wait
			}
		}
	}
	restore := r.ReloadableConfig()
	restore.HeartbeatTimeout, restore.ElectionTimeout = cfg.HeartbeatTimeout, cfg.ElectionTimeout
	if err := r.ReloadConfig(restore); err != nil {
		g.m.log.Warn("leader gone: could not restore the election timeout", "err", err)
	}
}

func (g *leaderGone) collectors() []prometheus.Collector {
	return []prometheus.Collector{prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "coordrun_raft_early_elections_total",
		Help: "Elections this member started early because the leader's peer port refused connections after its connection ended (its process died).",
	}, func() float64 { return float64(g.early.Load()) })}
}

// endConn tells end once when a read of the connection fails: the
// other side closed it, or it broke.
type endConn struct {
	net.Conn
	once sync.Once
	end  func()
}

func (c *endConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil {
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			c.once.Do(c.end)
		}
	}
	return n, err
}
