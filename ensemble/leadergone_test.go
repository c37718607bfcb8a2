package ensemble

import (
	"context"
	"testing"
	"time"

	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/hashicorp/raft"
)

// crash stops m as a killed process would look to the others: raft stops
// without handing over, the connections it opened close, and its peer
// port refuses new ones.
func crash(t *testing.T, m *Member) {
	t.Helper()
	if err := m.raft.Shutdown().Error(); err != nil {
		t.Fatal(err)
	}
	m.trans.CloseStreams()
	m.mux.Close()
}

// A leader that dies is replaced by an election that a follower starts
// early, on the leader's connection ending and its port refusing, not
// only once the heartbeats have been missing for the full timeout; the
// follower's timeouts are back to the configured ones afterwards.
func TestEarlyElectionWhenLeaderDies(t *testing.T) {
	c := startCluster(t, 3)
	l := c.waitLeader()
	var rest []*Member
	for _, m := range c.Members() {
		if m != l {
			rest = append(rest, m)
		}
	}
	crash(t, l)
	testkit.WaitFor(t, 30*time.Second, "a new leader", func() bool {
		for _, m := range rest {
			if m.raft.State() == raft.Leader {
				return true
			}
		}
		return false
	})
	var early int64
	for _, m := range rest {
		early += m.gone.early.Load()
	}
	if early == 0 {
		t.Fatal("no member started the election early")
	}
	testkit.WaitFor(t, 30*time.Second, "the configured timeouts back", func() bool {
		for _, m := range rest {
			rc := m.raft.ReloadableConfig()
			if rc.HeartbeatTimeout != m.cfg.HeartbeatTimeout || rc.ElectionTimeout != m.cfg.ElectionTimeout {
				return false
			}
		}
		return true
	})
}

// A connection that ends while the leader lives (its port answers)
// changes nothing.
func TestNoEarlyElectionWhileLeaderAnswers(t *testing.T) {
	c := startCluster(t, 3)
	l := c.waitLeader()
	var f *Member
	for _, m := range c.Members() {
		if m != l {
			f = m
		}
	}
	probed := make(chan error, 16)
	dial := *f.gone.dial.Load()
	probe := func(ctx context.Context, addr string) error {
		err := dial(ctx, addr)
		select {
		case probed <- err:
		default:
		}
		return err
	}
	f.gone.dial.Store(&probe)
	f.gone.ended()
	if err := testkit.Recv(t, probed, 10*time.Second, "the probe of the leader"); err != nil {
		t.Fatalf("probe of a live leader: %v", err)
	}
	// The probe's verdict is acted on in the same goroutine: a second
	// probe shows the first one is done with.
	f.gone.ended()
	testkit.Recv(t, probed, 10*time.Second, "the second probe")
	if n := f.gone.early.Load(); n != 0 {
		t.Fatalf("%d early elections with the leader alive", n)
	}
	if rc := f.raft.ReloadableConfig(); rc.HeartbeatTimeout != f.cfg.HeartbeatTimeout {
		t.Fatalf("heartbeat timeout %v, want %v", rc.HeartbeatTimeout, f.cfg.HeartbeatTimeout)
	}
}
