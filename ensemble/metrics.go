package ensemble

import (
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics is a member's Prometheus instrumentation.
//
// Every member has its own registry rather than the global default one, so
// that several members can run in one process (the tests do) and each
// admin listener reports only its own member. Whatever the member already
// knows (tree sizes, sessions, raft indexes) is read at scrape time through
// metricSources; nothing polls in the background. What happens in the
// request path is counted by requestStats as it happens, and read from
// there.
//
// Safe for concurrent use.
type metrics struct {
	reg   *prometheus.Registry
	store prometheus.Histogram // raft log appends
}

// metricSources are what the metrics read when the registry is gathered.
// The raft getters may only be called once raft runs: a registry cannot be
// gathered before Start has returned.
type metricSources struct {
	id       string // member id, a label of coordrun_member_info
	stats    *requestStats
	counts   func() (nodes, ephemerals int, dataSize int64)
	sessions func() int
	watches  func() int
	lastZxid func() int64

	raftState    func() raft.RaftState
	term         func() uint64
	commitIndex  func() uint64
	appliedIndex func() uint64
}

// A log append is one bolt transaction and its fsync: tens of µs on a
// fast SSD with a write cache, tens of ms on a busy disk.
var storeBuckets = []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}

// newMetrics builds a member's registry over src.
func newMetrics(src metricSources) *metrics {
	x := &metrics{reg: prometheus.NewRegistry()}
	x.store = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "coordrun_raft_log_store_duration_seconds",
		Help:    "Time to append entries to the raft log (one bolt transaction including its fsync).",
		Buckets: storeBuckets,
	})
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	counter := func(name, help string, v *atomic.Int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(v.Load()) })
	}
	nodes := func() float64 { n, _, _ := src.counts(); return float64(n) }
	ephemerals := func() float64 { _, e, _ := src.counts(); return float64(e) }
	dataSize := func() float64 { _, _, s := src.counts(); return float64(s) }
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "coordrun_member_info",
		Help:        "Always 1; labels name the member and the version it runs.",
		ConstLabels: prometheus.Labels{"id": src.id, "version": Version},
	})
	info.Set(1)
	st := src.stats
	x.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		info,
		st.latency,
		st.stages,
		st.notified,
		st.grouped,
		st.refused,
		x.store,
		gauge("coordrun_outstanding_requests", "Client requests read but not yet answered.",
			func() float64 { return float64(st.outstanding.Load()) }),
		gauge("coordrun_client_connections", "Open client connections.",
			func() float64 { return float64(st.connections.Load()) }),
		gauge("coordrun_sessions", "Live sessions in the ensemble.",
			func() float64 { return float64(src.sessions()) }),
		gauge("coordrun_znodes", "Znodes in the tree.", nodes),
		gauge("coordrun_ephemerals", "Ephemeral znodes in the tree.", ephemerals),
		gauge("coordrun_znode_data_bytes", "Approximate size of the tree's paths and data.", dataSize),
		gauge("coordrun_watches", "Watches registered on this member.",
			func() float64 { return float64(src.watches()) }),
		gauge("coordrun_raft_term", "Current raft term.",
			func() float64 { return float64(src.term()) }),
		gauge("coordrun_raft_commit_index", "Highest raft log index known committed.",
			func() float64 { return float64(src.commitIndex()) }),
		gauge("coordrun_raft_applied_index", "Highest raft log index applied here (including raft's own entries).",
			func() float64 { return float64(src.appliedIndex()) }),
		gauge("coordrun_last_zxid", "Zxid of the last transaction applied to the tree here.",
			func() float64 { return float64(src.lastZxid()) }),
		counter("coordrun_client_received_bytes_total", "Bytes received on client connections.", &st.bytesIn),
		counter("coordrun_client_sent_bytes_total", "Bytes sent on client connections.", &st.bytesOut),
		counter("coordrun_watch_notifications_total", "Watch events sent to clients.", &st.notifications),
	)
	for _, s := range []raft.RaftState{raft.Follower, raft.Candidate, raft.Leader, raft.Shutdown} {
		x.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "coordrun_raft_state",
			Help:        "1 for the raft state this member is in, 0 for the others.",
			ConstLabels: prometheus.Labels{"state": strings.ToLower(s.String())},
		}, func() float64 {
			if src.raftState() == s {
				return 1
			}
			return 0
		}))
	}
	return x
}

// timeLogStore wraps the raft log store so that appends are timed.
func (x *metrics) timeLogStore(s raft.LogStore) raft.LogStore {
	return timedLogStore{LogStore: s, hist: x.store}
}

// timedLogStore times StoreLog and StoreLogs of the store it wraps; with
// raft-boltdb each is one transaction ending in an fsync, so this is the
// member's fsync latency. (raft-boltdb's own go-metrics go to a
// process-wide sink, which cannot tell members apart.)
type timedLogStore struct {
	raft.LogStore
	hist prometheus.Observer
}

func (s timedLogStore) StoreLog(l *raft.Log) error {
	start := time.Now()
	err := s.LogStore.StoreLog(l)
	s.hist.Observe(time.Since(start).Seconds())
	return err
}

func (s timedLogStore) StoreLogs(ls []*raft.Log) error {
	start := time.Now()
	err := s.LogStore.StoreLogs(ls)
	s.hist.Observe(time.Since(start).Seconds())
	return err
}

// IsMonotonic passes the wrapped store's answer on: raft checks for
// raft.MonotonicLogStore on the store it is given.
func (s timedLogStore) IsMonotonic() bool {
	ms, ok := s.LogStore.(raft.MonotonicLogStore)
	return ok && ms.IsMonotonic()
}

var _ raft.MonotonicLogStore = timedLogStore{}
