package ensemble

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/coordrun/coordrun/ensemble/tree"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/ensemble/zk"
	"github.com/prometheus/client_golang/prometheus"
)

// The member-wide quota on the tree: a client that creates znodes without
// bound would otherwise fill every member's memory and disk, with no
// limit but the machines'. A write that would take the tree past
// Config.MaxTreeNodes or MaxTreeBytes (paths and data, ZooKeeper's
// approximate_data_size) is refused with QUOTAEXCEEDED before it reaches
// the log, and the alarm stays raised until the tree is back under both.
// Deletes, and writes that do not grow the tree, always pass: they are
// how the tree shrinks. The check reads this member's tree, which may be
// a few entries behind the leader's; the bound is on the order of the
// writes in flight, not exact.

// Defaults sized for a coordination service: configuration, locks and
// membership, not a database. A million znodes of a few hundred bytes
// take a member about 1 GiB of memory.
const (
	defaultMaxTreeNodes = 1_000_000
	defaultMaxTreeBytes = 1 << 30
)

type treeQuota struct {
	maxNodes int
	maxBytes int64
	counts   func() (nodes, ephemerals int, dataSize int64)
	log      *slog.Logger

	raised  atomic.Bool
	refused atomic.Int64
}

// room says whether txn may go to the log, and if not the op to refuse.
func (q *treeQuota) room(txn *tree.Txn) (ok bool, at int) {
	dn, db, at := zk.Growth(txn)
	if at < 0 {
		return true, 0
	}
	nodes, _, bytes := q.counts()
	if nodes+dn <= q.maxNodes && bytes+db <= q.maxBytes {
		return true, 0
	}
	q.refused.Add(1)
	if q.raised.CompareAndSwap(false, true) {
		q.log.Warn("tree quota reached: writes that grow the tree are refused (QUOTAEXCEEDED) until it shrinks below the limits",
			"znodes", nodes, "max_tree_nodes", q.maxNodes, "bytes", bytes, "max_tree_bytes", q.maxBytes)
	}
	return false, at
}

// alarm is the quota alarm's text, or "" once the tree is back under the
// limits. It is raised on a member that refused a write, and on every
// member whose tree is at a limit (the refusals happen where the clients
// are).
func (q *treeQuota) alarm() string {
	nodes, _, bytes := q.counts()
	atLimit := nodes >= q.maxNodes || bytes >= q.maxBytes
	if !q.raised.Load() && !atLimit {
		return ""
	}
	if !atLimit {
		if q.raised.CompareAndSwap(true, false) {
			q.log.Info("tree back under its quota: writes resume", "znodes", nodes, "bytes", bytes)
		}
		return ""
	}
	return fmt.Sprintf("tree quota: %d znodes of %d (--max-tree-nodes), %d bytes of %d (--max-tree-bytes); writes that grow the tree are refused until znodes are deleted",
		nodes, q.maxNodes, bytes, q.maxBytes)
}

func (q *treeQuota) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "coordrun_tree_quota_exceeded",
			Help: "1 while the tree is at its quota (--max-tree-nodes, --max-tree-bytes) and writes that grow it are refused, else 0."},
			func() float64 {
				if q.alarm() != "" {
					return 1
				}
				return 0
			}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "coordrun_tree_quota_refusals_total",
			Help: "Writes refused with QUOTAEXCEEDED because the tree was at its quota."},
			func() float64 { return float64(q.refused.Load()) }),
	}
}

// quotaRefusal says whether the tree quota refuses plan, which it then
// turns into the refusal.
func (e *connEnv) quotaRefusal(plan *zk.Plan) bool {
	if e.quota == nil {
		return false
	}
	ok, at := e.quota.room(plan.Txn)
	if !ok {
		plan.Refuse(wire.ErrQuotaExceeded, at)
	}
	return !ok
}

// ParseSize reads a size with its unit: B, KB, MB, GB (powers of 1000) or
// KiB, MiB, GiB (powers of 1024), e.g. "512MiB". A bare number is refused:
// whether 1024 meant bytes or KiB is exactly the mistake it would hide.
func ParseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	i := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '-' && r != '.' })
	if i < 0 {
		return 0, fmt.Errorf("size %q has no unit: say %sB, %sKiB, %sMiB or %sGiB", s, s, s, s, s)
	}
	num, unit := s[:i], strings.TrimSpace(s[i:])
	mult := map[string]int64{"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[unit]
	if mult == 0 {
		return 0, fmt.Errorf("size %q: unknown unit %q (B, KB, MB, GB, KiB, MiB, GiB)", s, unit)
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: %q is not a whole number", s, num)
	}
	if n < 0 {
		return 0, fmt.Errorf("size %q is negative", s)
	}
	if n > (1<<63-1)/mult {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return n * mult, nil
}
