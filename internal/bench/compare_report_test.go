package main

import (
	"bytes"
	"strings"
	"testing"
)

// The headline's ratio columns cover every system measured beside
// coordrun: with -base-bin the coordrun-base column is the before and
// after, and must not be left empty.
func TestHeadlineRatiosIncludeBase(t *testing.T) {
	rep := compareReport{
		Systems: []systemInfo{{Name: "coordrun"}, {Name: "coordrun-base"}, {Name: "zookeeper"}},
		KV: []result{
			{Workload: "write", System: "coordrun", Clients: 1, OpsPerSec: 600, P50Ms: 1.5},
			{Workload: "write", System: "coordrun-base", Clients: 1, OpsPerSec: 500, P50Ms: 2},
			{Workload: "write", System: "zookeeper", Clients: 1, OpsPerSec: 400, P50Ms: 3},
		},
	}
	rep.buildHeadline()
	var p50 *metricRow
	for i := range rep.Headline {
		if r := &rep.Headline[i]; r.Workload == "write x1" && r.Metric == "p50 ms" {
			p50 = r
		}
	}
	if p50 == nil {
		t.Fatalf("no write x1 p50 row in %+v", rep.Headline)
	}
	if got := p50.Ratios["coordrun/coordrun-base"]; got != 0.75 {
		t.Errorf("coordrun/coordrun-base p50 ratio = %v, want 0.75 (ratios %v)", got, p50.Ratios)
	}
	if got := p50.Ratios["coordrun/zookeeper"]; got != 0.5 {
		t.Errorf("coordrun/zookeeper p50 ratio = %v, want 0.5", got)
	}
	var out bytes.Buffer
	rep.print(&out)
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.Contains(line, "p50 ms") && strings.Contains(line, "write x1") {
			if !strings.Contains(line, "0.75x") || !strings.Contains(line, "0.50x") {
				t.Errorf("write x1 p50 line lacks a ratio: %q", line)
			}
		}
	}
}
