package main

import (
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The write stages a coordrun member reports (coordrun_write_stage_seconds),
// in the order a write passes them.
var stageOrder = []string{"decode", "propose", "forward", "commit", "apply", "own_apply", "sequence", "write", "notify"}

// stageHist is one stage's histogram, summed over a system's members.
type stageHist struct {
	count   uint64
	sum     float64
	buckets map[float64]uint64 // upper bound → cumulative count
}

// stageRow is what a workload's window added to one stage.
type stageRow struct {
	Stage  string  `json:"stage"`
	Writes uint64  `json:"count"`
	MeanUs float64 `json:"mean_us"`
	P50Us  float64 `json:"p50_us"`
}

var metricsHTTP = &http.Client{Timeout: 5 * time.Second}

// stages scrapes every member's admin listener; nil for a system without
// one.
func (s *system) stages() (map[string]stageHist, error) {
	out := map[string]stageHist{}
	for _, m := range s.members {
		if m.adminAddr == "" {
			return nil, nil
		}
		resp, err := metricsHTTP.Get("http://" + m.adminAddr + "/metrics")
		if err != nil {
			return nil, err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		p := expfmt.NewTextParser(model.UTF8Validation)
		mfs, err := p.TextToMetricFamilies(strings.NewReader(string(b)))
		if err != nil {
			return nil, fmt.Errorf("metrics of %s: %w", m.adminAddr, err)
		}
		addStages(out, mfs["coordrun_write_stage_seconds"])
		addStages(out, mfs["coordrun_notification_seconds"]) // as stage "notify"
	}
	return out, nil
}

func addStages(out map[string]stageHist, mf *dto.MetricFamily) {
	if mf == nil {
		return
	}
	for _, mt := range mf.Metric {
		h := mt.GetHistogram()
		if h == nil {
			continue
		}
		name := "notify" // the notification histogram has no stage label
		for _, l := range mt.Label {
			if l.GetName() == "stage" {
				name = l.GetValue()
			}
		}
		sh := out[name]
		if sh.buckets == nil {
			sh.buckets = map[float64]uint64{}
		}
		sh.count += h.GetSampleCount()
		sh.sum += h.GetSampleSum()
		for _, b := range h.Bucket {
			sh.buckets[b.GetUpperBound()] += b.GetCumulativeCount()
		}
		out[name] = sh
	}
}

// stageRows is what happened between two scrapes, stage by stage.
func stageRows(before, after map[string]stageHist) []stageRow {
	if after == nil {
		return nil
	}
	var rows []stageRow
	for _, name := range stageOrder {
		a, b := after[name], before[name]
		n := a.count - b.count
		if n == 0 {
			continue
		}
		delta := map[float64]uint64{}
		for ub, c := range a.buckets {
			delta[ub] = c - b.buckets[ub]
		}
		rows = append(rows, stageRow{Stage: name, Writes: n, MeanUs: (a.sum - b.sum) / float64(n) * 1e6, P50Us: bucketQuantile(delta, n, 0.5) * 1e6})
	}
	return rows
}

// bucketQuantile estimates a quantile from cumulative bucket counts, by
// linear interpolation inside the bucket it falls in (as Prometheus's
// histogram_quantile does).
func bucketQuantile(cum map[float64]uint64, n uint64, q float64) float64 {
	ubs := make([]float64, 0, len(cum))
	for ub := range cum {
		ubs = append(ubs, ub)
	}
	sort.Float64s(ubs)
	rank := q * float64(n)
	lower, below := 0.0, uint64(0)
	for _, ub := range ubs {
		c := cum[ub]
		if float64(c) >= rank {
			if c == below {
				return ub
			}
			return lower + (ub-lower)*(rank-float64(below))/float64(c-below)
		}
		lower, below = ub, c
	}
	return lower
}

// stageTable is one workload's stage breakdown, as printed.
type stageTable struct {
	label string // "write x128"
	rows  []stageRow
}

// printStageTables prints tables under header, if there are any.
func printStageTables(out io.Writer, header string, tables []stageTable) {
	if len(tables) == 0 {
		return
	}
	fmt.Fprint(out, header)
	for _, t := range tables {
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "%s\tstage\tcount\tmean µs\tp50 µs\t\n", t.label)
		for _, r := range t.rows {
			fmt.Fprintf(tw, "\t%s\t%d\t%.0f\t%.0f\t\n", r.Stage, r.Writes, r.MeanUs, r.P50Us)
		}
		tw.Flush()
	}
}

// printLockStages prints where the handoffs of the pred rows went.
func printLockStages(out io.Writer, locks []handoffResult) {
	var ts []stageTable
	for _, x := range locks {
		if x.Workload == "pred" && len(x.Stages) > 0 {
			ts = append(ts, stageTable{fmt.Sprintf("pred x%d", x.Waiters), x.Stages})
		}
	}
	printStageTables(out, "\nwhere a pred handoff's time goes on coordrun (from the gate's delete to the last measured holder: the releases'\n"+
		"and the takes' writes; notify = a release applied on the waiter's member → its notification written)\n", ts)
}

// printStages prints the stage breakdown of the write rows that have one.
func printStages(out io.Writer, kv []result) {
	var ts []stageTable
	for _, x := range kv {
		if x.Workload == "write" && len(x.Stages) > 0 {
			label := fmt.Sprintf("write x%d", x.Clients)
			if x.System != "coordrun" {
				label = x.System + " " + label
			}
			ts = append(ts, stageTable{label, x.Stages})
		}
	}
	printStageTables(out, "\nwhere a write's time goes on coordrun (coordrun_write_stage_seconds over all members during the window;\n"+
		"commit and apply are the leader's, forward and own_apply a follower's; write is per batch of replies written)\n", ts)
}
