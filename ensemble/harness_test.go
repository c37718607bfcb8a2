package ensemble

import (
	"testing"

	"github.com/coordrun/coordrun/internal/testkit"
)

// cluster is the kit's in-process ensemble, plus what these in-package
// tests want beyond it: every member's config, and, before a leader
// counts, the agreement of every running member on it (raft knows).
type cluster struct {
	*testkit.Cluster[*Member]
	t    *testing.T
	cfgs []Config
}

// startCluster starts n members, each configured by the tweaks, and waits
// for a leader.
func startCluster(t *testing.T, n int, tweak ...func(*Config)) *cluster {
	t.Helper()
	c := &cluster{t: t}
	c.Cluster = testkit.StartCluster(t, testkit.ClusterConfig[*Member]{
		Members: n,
		Start: func(s testkit.MemberSpec) (*Member, error) {
			// A restart takes the member's first config again, on
			// listeners bound anew.
			if s.Index == len(c.cfgs) {
				c.cfgs = append(c.cfgs, memberConfig(s, tweak))
			}
			cfg := c.cfgs[s.Index]
			cfg.PeerListener, cfg.ClientListener = s.PeerListener, s.ClientListener
			return Start(cfg)
		},
		LeaderOf: func(m *Member) string {
			_, id := m.raft.LeaderWithID()
			return string(id)
		},
	})
	return c
}

// memberConfig is the config of the member s describes, with the kit's
// timing, then the tweaks.
func memberConfig(s testkit.MemberSpec, tweak []func(*Config)) Config {
	cfg := Config{ID: s.ID, DataDir: s.DataDir, ClientAddr: s.ClientAddr, Logger: s.Logger, PeerSecret: s.PeerSecret,
		MinSessionTimeout: testkit.MinSessionTimeout, HeartbeatTimeout: testkit.HeartbeatTimeout, ElectionTimeout: testkit.ElectionTimeout}
	for _, p := range s.Peers {
		cfg.Peers = append(cfg.Peers, Peer(p))
	}
	for _, f := range tweak {
		f(&cfg)
	}
	return cfg
}

// waitLeader waits until every running member knows the same leader and
// returns it.
func (c *cluster) waitLeader() *Member { return c.Member(c.WaitLeader(c.t)) }
