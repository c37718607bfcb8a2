package supervisor

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/coordrun/coordrun/supervisor/engine"
	"github.com/coordrun/coordrun/supervisor/state"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// CronMetrics are a cron process's Prometheus metrics, per job. The
// last-* gauges start from the records in the ensemble and then follow
// the firings this host ends, so that across hosts the newest value
// (max by job) is the job's; the counters and the histogram count this
// host's own.
type CronMetrics struct {
	reg           *prometheus.Registry
	lastScheduled *prometheus.GaugeVec
	lastSuccess   *prometheus.GaugeVec
	lastResult    *prometheus.GaugeVec
	runs          *prometheus.CounterVec
	retries       *prometheus.CounterVec
	duration      *prometheus.HistogramVec
	linesCut      *prometheus.CounterVec

	mu       sync.Mutex                    // guards latest, success, and the textfile's writes
	latest   map[string]state.FiringRecord // job → newest firing seen
	success  map[string]time.Time          // job → end of its newest run that exited 0
	textfile string
}

// NewCronMetrics makes the metrics; textfile, when set, is a file they are
// also written to (node_exporter's textfile collector) after every change.
func NewCronMetrics(textfile string) *CronMetrics {
	m := &CronMetrics{
		reg: prometheus.NewRegistry(),
		lastScheduled: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "coordrun_cron_last_scheduled_timestamp_seconds",
			Help: "Scheduled time of the job's newest firing this host knows of."}, []string{"cron_job"}),
		lastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "coordrun_cron_last_success_timestamp_seconds",
			Help: "End of the job's newest run that exited 0, as far as this host knows."}, []string{"cron_job"}),
		lastResult: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "coordrun_cron_last_result",
			Help: "1 for how the job's newest ended firing ended (done, failed, lost, timed-out, skipped, paused), 0 for the others."}, []string{"cron_job", "result"}),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coordrun_cron_firings_total",
			Help: "Firings this host ended or recorded, by result."}, []string{"cron_job", "result"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coordrun_cron_retries_total",
			Help: "Firings this host ran again, after a loss with their host or a failed run."}, []string{"cron_job"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "coordrun_cron_run_duration_seconds",
			Help:    "How long this host's runs took, from the job's start to its end.",
			Buckets: prometheus.ExponentialBuckets(0.1, 4, 10)}, []string{"cron_job"}),
		linesCut: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coordrun_cron_output_lines_cut_total",
			Help: "Lines of the job's output longer than 16 KiB, each cut into several in the journal."}, []string{"cron_job"}),
		latest:   map[string]state.FiringRecord{},
		success:  map[string]time.Time{},
		textfile: textfile,
	}
	m.reg.MustRegister(m.lastScheduled, m.lastSuccess, m.lastResult, m.runs, m.retries, m.duration, m.linesCut)
	return m
}

// Registry is what /metrics serves.
func (m *CronMetrics) Registry() *prometheus.Registry { return m.reg }

// seed sets the last-* gauges from the job's records in the ensemble.
func (m *CronMetrics) seed(ctx context.Context, c engine.Store, root string, j *CronJob) {
	recs, err := CronHistory(ctx, c, root, j.Name)
	if err != nil {
		return
	}
	for _, r := range recs {
		m.note(j.Name, r, false)
	}
	m.flush()
}

// observe takes a firing this host ended or recorded.
func (m *CronMetrics) observe(job string, r state.FiringRecord) {
	m.note(job, r, true)
	m.flush()
}

// cutLines counts the long lines of a run's output cut for the journal.
func (m *CronMetrics) cutLines(job string, n int64) {
	if n > 0 {
		m.linesCut.WithLabelValues(job).Add(float64(n))
	}
}

// retried counts a firing this host runs again.
func (m *CronMetrics) retried(job string) {
	m.retries.WithLabelValues(job).Inc()
	m.flush()
}

func (m *CronMetrics) note(job string, r state.FiringRecord, own bool) {
	res := state.ResultOf(r)
	ended := !r.State.InFlight()
	if own && ended {
		m.runs.WithLabelValues(job, string(res)).Inc()
		if !r.Start.IsZero() && !r.End.IsZero() {
			m.duration.WithLabelValues(job).Observe(r.End.Sub(r.Start).Seconds())
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if prev, ok := m.latest[job]; !ok || r.Scheduled.After(prev.Scheduled) {
		m.latest[job] = r
		m.lastScheduled.WithLabelValues(job).Set(float64(r.Scheduled.UnixNano()) / 1e9)
	}
	if res == state.ResultDone && !r.End.IsZero() && r.End.After(m.success[job]) {
		m.success[job] = r.End
		m.lastSuccess.WithLabelValues(job).Set(float64(r.End.UnixNano()) / 1e9)
	}
	if ended && !r.Scheduled.Before(m.latest[job].Scheduled) {
		for _, x := range state.Results {
			v := 0.0
			if x == res {
				v = 1
			}
			m.lastResult.WithLabelValues(job, string(x)).Set(v)
		}
	}
}

// flush writes the textfile, if any, whole: a temporary file renamed
// over the old one, so node_exporter never reads half of it.
func (m *CronMetrics) flush() {
	if m.textfile == "" {
		return
	}
	mfs, err := m.reg.Gather()
	if err != nil {
		return
	}
	var buf bytes.Buffer
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&buf, mf); err != nil {
			return
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	tmp := filepath.Join(filepath.Dir(m.textfile), fmt.Sprintf(".%s.%d.tmp", filepath.Base(m.textfile), os.Getpid()))
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
		return
	}
	if err := os.Rename(tmp, m.textfile); err != nil {
		_ = os.Remove(tmp)
	}
}
