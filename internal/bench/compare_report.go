package main

// The comparison's report: the headline table of ratios, its text and
// its files.

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"
)

// metricRow is one line of the headline table: a metric of a workload on
// every system that ran it, and coordrun's ratio to each other system.
type metricRow struct {
	Workload string             `json:"workload"`
	Metric   string             `json:"metric"`
	Better   string             `json:"better"` // "higher" or "lower"
	Values   map[string]float64 `json:"values"`
	Ratios   map[string]float64 `json:"ratios,omitempty"` // "coordrun/etcd": coordrun's value / etcd's
}

// write puts the JSON, the text and the plot where the flags say.
func (rep *compareReport) write(cfg config, cc compareConfig, text string) error {
	jsonPath, plotPath := cfg.jsonPath, cc.plotPath
	if cc.outDir != "" {
		if err := os.MkdirAll(cc.outDir, 0o755); err != nil {
			return err
		}
		if jsonPath == "" {
			jsonPath = filepath.Join(cc.outDir, "bench-compare.json")
		}
		if plotPath == "" {
			plotPath = filepath.Join(cc.outDir, "bench-compare.svg")
		}
		if err := os.WriteFile(filepath.Join(cc.outDir, "bench-compare.txt"), []byte(text), 0o644); err != nil {
			return err
		}
	}
	if plotPath == "" {
		plotPath = "bench-compare.svg"
	}
	if jsonPath != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(jsonPath, append(b, '\n'), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "wrote %s\n", jsonPath)
	}
	if plotPath != "-" {
		if err := rep.plot(plotPath); err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		fmt.Fprintf(os.Stderr, "wrote %s\n", plotPath)
	}
	return nil
}

// systemNames is the systems measured, in table order.
func (rep *compareReport) systemNames() []string {
	var out []string
	for _, s := range reportOrder {
		for _, x := range rep.Systems {
			if x.Name == s {
				out = append(out, s)
			}
		}
	}
	return out
}

// buildHeadline derives the headline rows from the results.
func (rep *compareReport) buildHeadline() {
	rep.Headline = nil
	add := func(workload, metric, better, sys string, v float64) {
		var row *metricRow
		for i := range rep.Headline {
			if r := &rep.Headline[i]; r.Workload == workload && r.Metric == metric {
				row = r
			}
		}
		if row == nil {
			rep.Headline = append(rep.Headline, metricRow{Workload: workload, Metric: metric, Better: better, Values: map[string]float64{}})
			row = &rep.Headline[len(rep.Headline)-1]
		}
		row.Values[sys] = v
	}
	for _, x := range rep.KV {
		name := fmt.Sprintf("%s x%d", x.Workload, x.Clients)
		add(name, "ops/s", "higher", x.System, x.OpsPerSec)
		add(name, "p50 ms", "lower", x.System, x.P50Ms)
		add(name, "p99 ms", "lower", x.System, x.P99Ms)
		if x.System != "raft" {
			add(name, "srv CPU µs/op", "lower", x.System, x.CPUPerOpUs)
		}
	}
	for _, x := range rep.Locks {
		name := fmt.Sprintf("%s x%d", x.Workload, x.Waiters)
		add(name, "handoffs/s", "higher", x.System, x.HandoffsPerSec)
		add(name, "p50 ms", "lower", x.System, x.P50Ms)
		add(name, "p99 ms", "lower", x.System, x.P99Ms)
		if x.Notifications >= 0 {
			add(name, "notif/release", "lower", x.System, x.NotifPerRelease)
		}
	}
	for _, x := range rep.Crashes {
		name := fmt.Sprintf("crash %gs", x.Requested)
		add(name, "kill→holder ms", "lower", x.System, x.MedianMs)
		add(name, "timeout s", "-", x.System, x.Negotiated)
		add(name, "minus timeout ms", "lower", x.System, x.OverMs)
	}
	for _, x := range rep.Failovers {
		add(failoverName(x), "writes resume ms", "lower", x.System, x.MedianMs)
	}
	for _, x := range rep.Startups {
		add("fresh start", "first write ms", "lower", x.System, x.MedianMs)
	}
	for _, x := range rep.Fanouts {
		name := fmt.Sprintf("fanout x%d", x.Watches)
		add(name, "set→reply ms", "lower", x.System, x.ReplyMs)
		add(name, "set→last notif ms", "lower", x.System, x.LastMs)
		add(name, "reply→last notif ms", "lower", x.System, x.ReplyToLastMs)
		add(name, "missing notifs", "lower", x.System, float64(x.Missing))
	}
	for _, x := range rep.Sessions {
		name := fmt.Sprintf("sessions x%d%s", x.Sessions, hogSuffix(x.Hogs))
		add(name, "open all ms", "lower", x.System, x.OpenMs)
		add(name, "refused", "lower", x.System, float64(x.Refused))
		add(name, "dropped while idle", "lower", x.System, float64(x.Dropped))
		add(name, "ping p99 ms", "lower", x.System, x.PingP99Ms)
		add(name, "leader changes", "lower", x.System, float64(x.Leaders))
		add(name, "RSS MiB, max member", "lower", x.System, mib(x.MaxRSSKiB))
		add(name, "VmHWM MiB, max member", "lower", x.System, mib(x.MaxHWMKiB))
		add(name, "close all ms", "lower", x.System, x.CloseMs)
	}
	for _, x := range rep.Trees {
		name := fmt.Sprintf("tree %d", x.Nodes)
		add(name, "populate ms", "lower", x.System, x.PopulateMs)
		add(name, "RSS MiB, max member", "lower", x.System, mib(x.RSSKiB))
		add(name, "follower catch-up ms", "lower", x.System, x.CatchUpMs)
	}
	for _, x := range rep.Storms {
		name := fmt.Sprintf("storm x%d%s", x.Sessions, hogSuffix(x.Hogs))
		add(name, "open+create all ms", "lower", x.System, x.OpenMs)
		add(name, "refused", "lower", x.System, float64(x.Refused))
		add(name, "survivors lost", "lower", x.System, float64(x.Lost))
		add(name, "ping p99 ms", "lower", x.System, x.PingP99Ms)
		add(name, "leader changes", "lower", x.System, float64(x.Elections))
		add(name, "ephemerals left - want", "lower", x.System, float64(x.Ephemerals-x.Want))
		add(name, "peak RSS MiB, max member", "lower", x.System, mib(x.PeakRSSKiB))
	}
	rss, hwm := map[string]float64{}, map[string]float64{}
	for _, m := range rep.Memory {
		rss[m.System] += mib(m.RSSKiB) / 3
		hwm[m.System] = math.Max(hwm[m.System], mib(m.HWMKiB))
	}
	for _, s := range rep.systemNames() {
		if _, ok := rss[s]; ok {
			add("memory", "VmRSS MiB/member", "lower", s, rss[s])
			add("memory", "max VmHWM MiB", "lower", s, hwm[s])
		}
	}
	for i := range rep.Headline {
		r := &rep.Headline[i]
		c, ok := r.Values["coordrun"]
		if !ok || r.Better == "-" {
			continue
		}
		// Every other system, coordrun-base (-base-bin) included: its
		// column is the before-and-after ratio.
		for _, o := range reportOrder[1:] {
			if v, ok := r.Values[o]; ok && v > 0 && c >= 0 {
				if r.Ratios == nil {
					r.Ratios = map[string]float64{}
				}
				r.Ratios["coordrun/"+o] = c / v
			}
		}
	}
}

func (rep *compareReport) print(out io.Writer) {
	fmt.Fprintf(out, "\n3 members per system on 127.0.0.1, %d CPUs (shared: compare ratios, not absolutes), %d-byte values, %v per throughput workload after %v warm-up\n",
		rep.CPUs, rep.ValueBytes, time.Duration(rep.DurationSec*float64(time.Second)), time.Duration(rep.WarmupSec*float64(time.Second)))
	for _, s := range rep.Systems {
		fmt.Fprintf(out, "  %-9s  %s\n", s.Name, s.Version)
	}
	for _, s := range rep.Skipped {
		fmt.Fprintf(out, "  %s\n", s)
	}
	fmt.Fprintln(out, `
write: setData (coordrun, zookeeper; go-zookeeper) / Put (etcd; clientv3) / Apply on the leader (raft); read: getData / serializable Get
(both answered by the member the client is on); read-lin: etcd's linearizable Get; mix: 1 write in 10; one session/client per client,
dealt over the members followers first. pred/herd xN: N waiters, at most the first -max-handoffs handoffs measured; pred = predecessor
watch (coordrun, zookeeper: the lock recipe with its run node; etcd: concurrency.Mutex), herd = all watch the folder/prefix; run xN:
through the real coordrun run binary. notif/release: watch notifications the members sent (coordrun, zookeeper: mntr) or etcd's
clients received, per release that had a waiter.
Ratios are coordrun's value over the other's: above 1 is better for "higher" metrics, below 1 for "lower" ones.`)
	fmt.Fprintln(out)
	names := rep.systemNames()
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	hdr := "workload\tmetric\t"
	for _, s := range names {
		hdr += s + "\t"
	}
	var others []string
	for _, s := range names[1:] {
		if names[0] == "coordrun" {
			others = append(others, s)
			hdr += "c/" + abbrev(s) + "\t"
		}
	}
	fmt.Fprintln(tw, hdr+"better\t")
	last := ""
	for _, r := range rep.Headline {
		wl := r.Workload
		if wl == last {
			wl = ""
		}
		last = r.Workload
		line := wl + "\t" + r.Metric + "\t"
		for _, s := range names {
			if v, ok := r.Values[s]; ok {
				line += num(v) + "\t"
			} else {
				line += "-\t"
			}
		}
		for _, o := range others {
			if v, ok := r.Ratios["coordrun/"+o]; ok {
				line += fmt.Sprintf("%.2fx\t", v)
			} else {
				line += "-\t"
			}
		}
		fmt.Fprintln(tw, line+r.Better+"\t")
	}
	tw.Flush()

	printStages(out, rep.KV)
	printLockStages(out, rep.Locks)
	for _, x := range rep.KV {
		if x.Errors > 0 {
			fmt.Fprintf(out, "%s x%d on %s: %d errors, first: %s\n", x.Workload, x.Clients, x.System, x.Errors, x.FirstError)
		}
	}
	for _, x := range rep.Locks {
		if x.Overlaps > 0 || x.Lost > 0 {
			fmt.Fprintf(out, "%s x%d on %s: %d overlaps, %d lost wake-ups\n", x.Workload, x.Waiters, x.System, x.Overlaps, x.Lost)
		}
	}
	if len(rep.Crashes)+len(rep.Failovers)+len(rep.Startups) > 0 {
		fmt.Fprintln(out, "\nsamples (ms): crash = SIGKILL of the holder to the next holder (coordrun/zookeeper: `coordrun run` supervisors;")
		fmt.Fprintln(out, "etcd: a holder process, lease TTL = the timeout); leader killed = SIGKILL of the leader to the first write issued after it")
		fmt.Fprintln(out, "succeeding through a follower; leader stopped = the same with SIGTERM; fresh start = first member started to the first write")
		for _, x := range rep.Crashes {
			fmt.Fprintf(out, "  crash %gs %-9s %s\n", x.Requested, x.System, samples(x.SamplesMs))
		}
		for _, x := range rep.Failovers {
			fmt.Fprintf(out, "  %s %-9s %s\n", failoverName(x), x.System, samples(x.SamplesMs))
		}
		for _, x := range rep.Startups {
			fmt.Fprintf(out, "  fresh start %-9s %s\n", x.System, samples(x.SamplesMs))
		}
	}
	if len(rep.Memory) > 0 {
		fmt.Fprintln(out)
		tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "memory\tmember\trole\tVmRSS MiB\tanon MiB\tfile MiB\tVmHWM MiB\t")
		for _, m := range rep.Memory {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%.1f\t%.1f\t%.1f\t%.1f\t\n", m.System, m.Member, m.Role, mib(m.RSSKiB), mib(m.AnonKiB), mib(m.FileKiB), mib(m.HWMKiB))
		}
		tw.Flush()
	}
}

// hogSuffix names a scale row's busy loops.
func hogSuffix(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" +%d hogs", n)
}

func abbrev(s string) string {
	if s == "zookeeper" {
		return "zk"
	}
	return s
}

// num prints a value with about three significant digits.
func num(v float64) string {
	switch a := math.Abs(v); {
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func samples(v []float64) string {
	var s []string
	for _, x := range v {
		s = append(s, fmt.Sprintf("%.0f", x))
	}
	return strings.Join(s, " ")
}

func failoverName(x recoveryResult) string {
	if x.Signal == "SIGTERM" {
		return "leader stopped"
	}
	return "leader killed"
}
