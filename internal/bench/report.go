package main

import (
	"fmt"
	"os"
	"runtime"
	"text/tabwriter"
	"time"
)

// systemInfo names a measured system and the version it reported.
type systemInfo struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

type memRow struct {
	System string `json:"system"`
	Member int    `json:"member"`
	Role   string `json:"role"`
	PID    int    `json:"pid"`
	RSSKiB int64  `json:"vmrss_kib"`
	HWMKiB int64  `json:"vmhwm_kib"`
	// AnonKiB and FileKiB split VmRSS: what the process allocated, and
	// the pages of files it maps (its binary, a database's mmap).
	AnonKiB int64 `json:"rss_anon_kib"`
	FileKiB int64 `json:"rss_file_kib"`
}

// runInfo heads every report: when and how the run was made, and on
// what. Embedded, so its fields stand at the top level of the JSON.
type runInfo struct {
	Started     time.Time `json:"started"`
	DurationSec float64   `json:"duration_sec"`
	WarmupSec   float64   `json:"warmup_sec"`
	ValueBytes  int       `json:"value_bytes"`
	CPUs        int       `json:"cpus"`
	GoVersion   string    `json:"go_version"`
}

func newRunInfo(cfg config) runInfo {
	return runInfo{
		Started: time.Now().UTC(), DurationSec: cfg.duration.Seconds(), WarmupSec: cfg.warmup.Seconds(),
		ValueBytes: cfg.valueSize, CPUs: runtime.NumCPU(), GoVersion: runtime.Version(),
	}
}

type report struct {
	runInfo
	TempDir string       `json:"temp_dir"`
	Systems []systemInfo `json:"systems"`
	Results []result     `json:"results"`
	Memory  []memRow     `json:"memory"`
	Lock    *lockReport  `json:"lock,omitempty"`
}

func (r *report) print(out *os.File) {
	defer func() {
		if r.Lock != nil {
			r.Lock.print(out)
		}
	}()
	if len(r.Results) == 0 {
		fmt.Fprintf(out, "\n3 members per system on 127.0.0.1, %d CPUs\n", r.CPUs)
		for _, s := range r.Systems {
			fmt.Fprintf(out, "  %-9s  %s\n", s.Name, s.Version)
		}
		r.printMemory(out)
		return
	}
	fmt.Fprintf(out, "\n3 members per system on 127.0.0.1, %d-byte values, %v per workload after %v warm-up, %d CPUs, client go-zookeeper/zk\n",
		r.ValueBytes, time.Duration(r.DurationSec*float64(time.Second)), time.Duration(r.WarmupSec*float64(time.Second)), r.CPUs)
	for _, s := range r.Systems {
		fmt.Fprintf(out, "  %-9s  %s\n", s.Name, s.Version)
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\tsystem\tops/s\tp50 ms\tp99 ms\terrors\tsrv CPU µs/op\t")
	find := func(w string, clients int, sys string) *result {
		for i := range r.Results {
			if x := &r.Results[i]; x.Workload == w && x.Clients == clients && x.System == sys {
				return x
			}
		}
		return nil
	}
	for _, x := range r.Results {
		name := fmt.Sprintf("%s x%d", x.Workload, x.Clients)
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.3f\t%.3f\t%d\t%.0f\t\n", name, x.System, x.OpsPerSec, x.P50Ms, x.P99Ms, x.Errors, x.CPUPerOpUs)
		// After the zookeeper row, the ratios of the pair.
		if c := find(x.Workload, x.Clients, "coordrun"); x.System == "zookeeper" && c != nil {
			fmt.Fprintf(tw, "%s\tcoordrun/zk\t%s\t%s\t%s\t\t%s\t\n", name,
				ratio(c.OpsPerSec, x.OpsPerSec), ratio(c.P50Ms, x.P50Ms), ratio(c.P99Ms, x.P99Ms), ratio(c.CPUPerOpUs, x.CPUPerOpUs))
		}
	}
	tw.Flush()
	for _, x := range r.Results {
		if x.Errors > 0 {
			fmt.Fprintf(out, "%s x%d on %s: %d errors, first: %s\n", x.Workload, x.Clients, x.System, x.Errors, x.FirstError)
		}
	}
	r.printMemory(out)
}

func (r *report) printMemory(out *os.File) {
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "memory\tmember\trole\tpid\tVmRSS MiB\tVmHWM MiB\t")
	totals := map[string]int64{}
	for _, m := range r.Memory {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%.1f\t%.1f\t\n", m.System, m.Member, m.Role, m.PID, mib(m.RSSKiB), mib(m.HWMKiB))
		totals[m.System] += m.RSSKiB
	}
	for _, s := range r.Systems {
		fmt.Fprintf(tw, "%s\ttotal\t\t\t%.1f\t\t\n", s.Name, mib(totals[s.Name]))
	}
	if c, z := totals["coordrun"], totals["zookeeper"]; c > 0 && z > 0 {
		fmt.Fprintf(tw, "coordrun/zk\t\t\t\t%s\t\t\n", ratio(float64(c), float64(z)))
	}
	tw.Flush()
}

func mib(kib int64) float64 { return float64(kib) / 1024 }

func ratio(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", a/b)
}
