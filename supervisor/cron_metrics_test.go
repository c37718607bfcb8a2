package supervisor_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/coordrun/coordrun/supervisor/state"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// cronParseMetrics reads Prometheus text exposition.
func cronParseMetrics(t *testing.T, b []byte) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("metrics do not parse: %v\n%s", err, b)
	}
	return mfs
}

// cronMetric is the value of family's series with label job (and, when
// set, result); ok is false if there is none.
func cronMetric(mfs map[string]*dto.MetricFamily, family, job, result string) (float64, bool) {
	mf := mfs[family]
	if mf == nil {
		return 0, false
	}
	for _, m := range mf.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["cron_job"] != job || result != "" && labels["result"] != result {
			continue
		}
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

// Two hosts serve metrics over HTTP and write them to a textfile; over
// both hosts the runs counted match the records, and the newest success
// and result are those of the newest record.
func TestCronMetrics(t *testing.T) {
	forEachCronBackend(t, cronMetrics)
}

func cronMetrics(t *testing.T, b *backend) {
	r := newRig(t, b)
	obs := cronObserver(t, b)
	root := cronRoot(b, "cron-metrics")
	const job = "metricsjob"
	addrs := testkit.FreeAddrs(t, "127.0.0.1", 2)
	dirs := []string{t.TempDir(), t.TempDir()}
	runs := r.path("runs.log")
	var procs []*proc
	for i := range 2 {
		label := fmt.Sprintf("p%d", i+1)
		args := cronProcArgs(b, root, job, "@every 1s", []string{"--metrics-addr", addrs[i], "--textfile", dirs[i]}, cronScript(runs, 0))
		procs = append(procs, r.startProc(label, []string{"CRON_HOST=" + label}, e2eBin, args...))
	}
	cronAwaitHosts(t, obs, root, job, 2)
	scrape := func(addr string) map[string]*dto.MetricFamily {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatalf("scrape %s: %v", addr, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return cronParseMetrics(t, body)
	}
	testkit.WaitFor(t, 20*time.Second, "five firings done", func() bool {
		n := 0
		for _, x := range cronHistory(t, obs, root, job) {
			if state.ResultOf(x) == "done" {
				n++
			}
		}
		return n >= 5
	})
	// Over HTTP, while they run: every family there, with its type, and
	// the runs counted (a host counts a run just after its record says
	// done).
	testkit.WaitFor(t, 5*time.Second, "the served metrics to count five runs done", func() bool {
		var served float64
		seen := map[string]bool{}
		for _, addr := range addrs {
			mfs := scrape(addr)
			for name, mf := range mfs {
				seen[name+" "+mf.GetType().String()] = true
			}
			n, _ := cronMetric(mfs, "coordrun_cron_firings_total", job, "done")
			served += n
		}
		// A host that has run nothing yet has no series of its own.
		for name, typ := range map[string]dto.MetricType{
			"coordrun_cron_last_scheduled_timestamp_seconds": dto.MetricType_GAUGE,
			"coordrun_cron_last_success_timestamp_seconds":   dto.MetricType_GAUGE,
			"coordrun_cron_last_result":                      dto.MetricType_GAUGE,
			"coordrun_cron_firings_total":                    dto.MetricType_COUNTER,
			"coordrun_cron_run_duration_seconds":             dto.MetricType_HISTOGRAM,
		} {
			if !seen[name+" "+typ.String()] {
				return false
			}
		}
		return served >= 5
	})
	cronStopProcs(t, procs)
	recs := cronHistory(t, obs, root, job)
	done, newest := 0, state.FiringRecord{}
	for _, x := range recs {
		if state.ResultOf(x) == "done" {
			done++
			if x.End.After(newest.End) {
				newest = x
			}
		}
	}
	// The textfiles hold what the hosts last knew, every run included.
	var counted, durations float64
	var success float64
	for i, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, "coordrun_cron_"+job+".prom"))
		if err != nil {
			t.Fatalf("host %d textfile: %v", i+1, err)
		}
		mfs := cronParseMetrics(t, b)
		n, _ := cronMetric(mfs, "coordrun_cron_firings_total", job, "done")
		d, _ := cronMetric(mfs, "coordrun_cron_run_duration_seconds", job, "")
		s, _ := cronMetric(mfs, "coordrun_cron_last_success_timestamp_seconds", job, "")
		counted, durations, success = counted+n, durations+d, max(success, s)
		if v, ok := cronMetric(mfs, "coordrun_cron_last_result", job, "done"); n > 0 && (!ok || v != 1) {
			t.Errorf("host %d: last_result{result=done} = %v (%v), want 1", i+1, v, ok)
		}
	}
	if int(counted) != done || int(durations) != done {
		t.Errorf("over both hosts: %v runs counted done, %v durations observed; the records hold %d done", counted, durations, done)
	}
	if want := float64(newest.End.UnixNano()) / 1e9; success < want-0.001 || success > want+0.001 {
		t.Errorf("newest success over both hosts: %v, the newest record ended at %v", success, want)
	}
	t.Logf("%d firings done; counted %v over two hosts; newest success %v", done, counted, newest.End.Format(time.RFC3339Nano))
}
