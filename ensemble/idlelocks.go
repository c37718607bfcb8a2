package ensemble

import (
	"path"
	"time"

	"github.com/coordrun/coordrun/ensemble/tree"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/prometheus/client_golang/prometheus"
)

// Idle lock folders: the leader removes a lock folder under the lock root
// (Config.StatusLockRoot) that has stayed empty, unchanged, for
// Config.RemoveIdleLocks, so that `coordrun status` and the status page
// stop listing every name ever used. ZooKeeper's container nodes do this
// for Curator's lock folders, but its ContainerManager deletes a
// container as soon as a periodic check finds it empty, which would take
// the folder's record of the last holder with it while that record still
// tells the next holder of an unclean end (its --lock-delay) or of a
// holder still stopping; an idle time keeps the record for as long as it
// can matter.
//
// The removal is an ordinary delete proposed by the leader through raft,
// as the super user, of the data version it saw: a contender that joined
// meanwhile makes the folder non-empty (the delete fails NOTEMPTY), and
// one that took the lock and left changed the record (BADVERSION). A
// contender that comes after the removal makes the folder again, as
// after `coordrun lock rm`. A semaphore's parts (gate, held, slot-K) are
// folders of the lock's folder and go the same way, the lock's folder
// once they are gone.

// idleFolder is a persistent childless node under the lock root, one or
// two levels down, as the leader last read it.
type idleFolder struct {
	path    string
	pzxid   int64 // changes with every child's create and delete
	version int32 // the data version: changes with every holder's record
}

// idleSince is when the leader first saw a folder empty at this state.
type idleSince struct {
	pzxid   int64
	version int32
	since   time.Time
}

// Bounds of one sweep: the folders it looks at (the look holds the
// tree's read lock) and the deletes it proposes; the rest waits for the
// next sweep.
const (
	maxIdleScan    = 100_000
	maxIdleRemoves = 100
)

// idleSweep decides which folders to remove. It keeps, per empty folder,
// when it was first seen in its current state; a folder seen otherwise
// (not empty, changed, gone) starts over. Pure: the caller reads the
// tree and proposes the deletes.
type idleSweep struct {
	seen map[string]idleSince
}

// due takes the empty folders read at now and returns those idle for at
// least idle, at most maxIdleRemoves of them.
func (s *idleSweep) due(now time.Time, idle time.Duration, empty []idleFolder) []idleFolder {
	next := make(map[string]idleSince, len(empty))
	var out []idleFolder
	for _, f := range empty {
		was, ok := s.seen[f.path]
		if !ok || was.pzxid != f.pzxid || was.version != f.version {
			was = idleSince{pzxid: f.pzxid, version: f.version, since: now}
		}
		next[f.path] = was
		if now.Sub(was.since) >= idle && len(out) < maxIdleRemoves {
			out = append(out, f)
		}
	}
	s.seen = next
	return out
}

// emptyFolders lists the persistent childless nodes of root's children
// and grandchildren (a semaphore's parts), at most maxIdleScan looked at.
func emptyFolders(t *tree.Tree, root string) []idleFolder {
	super := []tree.Identity{superID}
	var out []idleFolder
	scanned := 0
	var walk func(dir string, depth int)
	walk = func(dir string, depth int) {
		kids, _, err := t.Children(dir, super)
		if err != nil {
			return
		}
		for _, k := range kids {
			if scanned >= maxIdleScan {
				return
			}
			scanned++
			p := path.Join(dir, k)
			st, err := t.Exists(p)
			if err != nil || st.EphemeralOwner != 0 {
				continue
			}
			if st.NumChildren == 0 {
				out = append(out, idleFolder{path: p, pzxid: st.Pzxid, version: st.Version})
			} else if depth == 1 {
				walk(p, 2)
			}
		}
	}
	walk(root, 1)
	return out
}

// idleLockLoop runs on every member and sweeps while it leads. Each new
// leader starts its watch afresh: it cannot know what its predecessor saw.
func (m *Member) idleLockLoop() {
	idle := m.cfg.RemoveIdleLocks
	if idle <= 0 {
		return
	}
	removed := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "coordrun_idle_locks_removed_total",
		Help: "Lock folders the leader removed after they stayed empty for --remove-idle-locks.",
	})
	watched := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "coordrun_idle_locks_watched",
		Help: "Empty lock folders the leader watches for idleness (at most 100000 looked at per sweep).",
	})
	m.metrics.reg.MustRegister(removed, watched)
	every := min(max(idle/4, 10*time.Millisecond), time.Minute)
	t := time.NewTicker(every)
	defer t.Stop()
	var sweep idleSweep
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-t.C:
		}
		if !m.IsLeader() {
			sweep = idleSweep{}
			watched.Set(0)
			continue
		}
		var empty []idleFolder
		m.fsm.view(func(t *tree.Tree, _ int64) { empty = emptyFolders(t, m.cfg.StatusLockRoot) })
		due := sweep.due(time.Now(), idle, empty)
		watched.Set(float64(len(sweep.seen)))
		for _, f := range due {
			txn := &tree.Txn{Kind: tree.TxnOps, Auth: []tree.Identity{superID},
				Ops: []tree.Op{{Kind: tree.OpDelete, Path: f.path, Version: f.version}}}
			p, err := m.proposeLocal(txn)
			switch {
			case err != nil:
				m.log.Warn("could not remove an idle lock folder", "path", f.path, "err", err)
			case p.out.Err == wire.OK:
				removed.Inc()
				delete(sweep.seen, f.path)
				m.log.Info("removed an idle lock folder", "path", f.path, "idle", idle)
			case p.out.Err == wire.ErrNotEmpty, p.out.Err == wire.ErrBadVersion, p.out.Err == wire.ErrNoNode:
				// Used meanwhile, or removed by hand: the next sweep sees.
			default:
				m.log.Warn("could not remove an idle lock folder", "path", f.path, "err", p.out.Err)
			}
		}
	}
}
