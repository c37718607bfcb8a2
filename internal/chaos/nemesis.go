package chaos

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"time"
)

// Fault kinds the nemesis injects.
const (
	FaultKill            = "kill"             // SIGKILL a random member, restart it
	FaultKillLeader      = "kill-leader"      // SIGKILL the leader, restart it
	FaultPause           = "pause"            // SIGSTOP a member longer than the election timeout
	FaultPartitionLeader = "partition-leader" // the leader alone on one side
	FaultPartitionSplit  = "partition-split"  // a minority against a majority
	FaultOneWay          = "one-way"          // peer bytes dropped in one direction only
	FaultClientCut       = "client-cut"       // clients cannot reach a member
	FaultRebuild         = "rebuild"          // a member's disk wiped and rebuilt from the others
	// Disk faults (disk.go); they need Config.Failpoints or DiskBytes.
	FaultFsync       = "fsync-fail"        // a member's fsync fails: it stops, and is restarted
	FaultFsyncLeader = "fsync-fail-leader" // the same on the leader
	FaultDiskFull    = "disk-full"         // a member's filesystem filled, then freed
	FaultDiskFullAll = "disk-full-all"     // every member's filesystem filled, then freed
)

var faultKinds = []string{FaultKill, FaultKillLeader, FaultPause, FaultPartitionLeader,
	FaultPartitionSplit, FaultOneWay, FaultClientCut}

type nemesis struct {
	c      *Cluster
	kinds  []string // what it picks from; nil: faultKinds
	rng    *rand.Rand
	log    io.Writer
	faults map[string]int
	// fullSeen counts each member's disk-full log lines seen so far
	// (disk.go).
	fullSeen map[int]int
}

func (n *nemesis) logf(format string, args ...any) {
	fmt.Fprintf(n.log, "chaos: "+format+"\n", args...)
}

func (n *nemesis) leader(ctx context.Context) int {
	lctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	l, err := n.c.Leader(lctx)
	if err != nil {
		return n.rng.IntN(n.c.N())
	}
	return l
}

// pace sleeps between faults; the schedule, not a condition, is waited for.
func (n *nemesis) pace(lo, hi time.Duration) {
	time.Sleep(lo + time.Duration(n.rng.Int64N(int64(hi-lo))))
}

// run injects faults one at a time for d: apply, hold, undo, pause. One
// disk rebuild happens in the second half of the run.
func (n *nemesis) run(ctx context.Context, d time.Duration) error {
	start := time.Now()
	rebuilt := false
	for time.Since(start) < d && ctx.Err() == nil {
		n.pace(300*time.Millisecond, 1200*time.Millisecond)
		kinds := n.kinds
		if len(kinds) == 0 {
			kinds = faultKinds
		}
		kind := kinds[n.rng.IntN(len(kinds))]
		if !rebuilt && time.Since(start) > d/2 {
			kind, rebuilt = FaultRebuild, true
		}
		if err := n.inject(ctx, kind); err != nil {
			return fmt.Errorf("%s: %w", kind, err)
		}
		n.faults[kind]++
		// Let the ensemble recover before the next fault, so that each
		// fault hits a working ensemble; one that does not recover is
		// noted but the run goes on.
		hctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		if err := n.c.WaitHealthy(hctx); err != nil {
			n.logf("not healthy 20s after %s: %v", kind, err)
			n.faults["slow-recovery"]++
		}
		cancel()
	}
	return nil
}

func (n *nemesis) inject(ctx context.Context, kind string) error {
	c := n.c
	hold := func() { n.pace(time.Second, 3*time.Second) }
	switch kind {
	case FaultKill, FaultKillLeader:
		i := n.rng.IntN(c.N())
		if kind == FaultKillLeader {
			i = n.leader(ctx)
		}
		n.logf("kill -9 member %d", i+1)
		if err := c.Kill(i); err != nil {
			return err
		}
		hold()
		return c.Restart(i)
	case FaultPause:
		i := n.rng.IntN(c.N())
		if n.rng.IntN(2) == 0 {
			i = n.leader(ctx)
		}
		n.logf("pause member %d", i+1)
		if err := c.Pause(i); err != nil {
			return err
		}
		hold()
		return c.Resume(i)
	case FaultPartitionLeader:
		l := n.leader(ctx)
		n.logf("isolate leader %d", l+1)
		c.Partition([]int{l})
	case FaultPartitionSplit:
		perm := n.rng.Perm(c.N())
		minority := perm[:(c.N()-1)/2]
		n.logf("partition %v from the rest", plusOne(minority))
		c.Partition(minority)
	case FaultOneWay:
		l := n.leader(ctx)
		f := (l + 1 + n.rng.IntN(c.N()-1)) % c.N()
		if n.rng.IntN(2) == 0 {
			l, f = f, l
		}
		n.logf("drop peer traffic %d -> %d", l+1, f+1)
		c.DropOneWay(l, f)
	case FaultClientCut:
		i := n.rng.IntN(c.N())
		n.logf("cut clients from member %d", i+1)
		c.CutClients(i, true)
	case FaultRebuild:
		hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := c.WaitHealthy(hctx)
		cancel()
		if err != nil {
			return err
		}
		i := n.rng.IntN(c.N())
		n.logf("rebuild member %d from an empty disk", i+1)
		rctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		defer cancel()
		return c.Rebuild(rctx, i)
	case FaultFsync, FaultFsyncLeader, FaultDiskFull, FaultDiskFullAll:
		return n.diskFault(ctx, kind, hold)
	}
	hold()
	c.Heal()
	return nil
}

// recover undoes whatever a fault left behind: network healed, paused
// members resumed, dead members restarted.
func (n *nemesis) recover(context.Context) {
	n.c.Heal()
	for i := 0; i < n.c.N(); i++ {
		if n.c.isPaused(i) {
			_ = n.c.Resume(i)
		}
		if !n.c.Running(i) {
			if err := n.c.Restart(i); err != nil {
				n.logf("restart member %d: %v", i+1, err)
			}
		}
	}
}

func plusOne(xs []int) []int {
	out := make([]int, len(xs))
	for i, x := range xs {
		out[i] = x + 1
	}
	return out
}
