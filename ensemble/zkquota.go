package ensemble

import (
	"log/slog"
	"sync"
	"time"

	"github.com/coordrun/coordrun/ensemble/tree"
	"github.com/prometheus/client_golang/prometheus"
)

// zkQuotaLogEvery bounds the log lines about ZooKeeper quotas (tree
// quota.go) to one a second: a client writing past a soft limit would
// otherwise log once per write. ZooKeeper rate-limits the same lines.
const zkQuotaLogEvery = time.Second

// zkQuotaLog logs and counts the ZooKeeper quotas the writes this member
// took went past, as ZooKeeper 3.8 logs "Quota exceeded: …" when it
// enforces quotas.
type zkQuotaLog struct {
	log *slog.Logger
	now func() time.Time

	mu         sync.Mutex // guards last and suppressed
	last       time.Time  // when a line was last written
	suppressed int        // lines left out since then

	// hard and soft count writes refused at a hard limit and writes past
	// a soft one, for /metrics; written under mu.
	hard, soft float64
}

func newZKQuotaLog(log *slog.Logger) *zkQuotaLog {
	return &zkQuotaLog{log: log, now: time.Now}
}

// note logs (at most one line per zkQuotaLogEvery) and counts passed.
func (z *zkQuotaLog) note(passed []tree.QuotaPassed) {
	z.mu.Lock()
	defer z.mu.Unlock()
	for _, p := range passed {
		if p.Hard {
			z.hard++
		} else {
			z.soft++
		}
		now := z.now()
		if !z.last.IsZero() && now.Sub(z.last) < zkQuotaLogEvery {
			z.suppressed++
			continue
		}
		z.log.Warn(p.String(), "path", p.Path, "refused", p.Hard, "suppressed_since_last", z.suppressed)
		z.last, z.suppressed = now, 0
	}
}

func (z *zkQuotaLog) counts() (hard, soft float64) {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.hard, z.soft
}

func (z *zkQuotaLog) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "coordrun_zk_quota_refusals_total",
			Help: "Writes this member took that were refused with QUOTAEXCEEDED at a ZooKeeper hard quota (setquota -N/-B, --enforce-quota)."},
			func() float64 { h, _ := z.counts(); return h }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "coordrun_zk_quota_soft_exceeded_total",
			Help: "Writes this member took that went past a ZooKeeper soft quota (setquota -n/-b) while --enforce-quota is on; they were made."},
			func() float64 { _, s := z.counts(); return s }),
	}
}
