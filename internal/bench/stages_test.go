package main

import (
	"math"
	"strings"
	"testing"
)

// bucketQuantile interpolates inside the bucket the rank falls in, as
// Prometheus's histogram_quantile does.
func TestBucketQuantile(t *testing.T) {
	cum := map[float64]uint64{0.001: 0, 0.002: 50, 0.004: 100, math.Inf(1): 100}
	for _, c := range []struct {
		q    float64
		want float64
	}{
		{0.5, 0.002},   // rank 50: the top of the second bucket
		{0.25, 0.0015}, // rank 25: halfway through it
		{0.75, 0.003},  // rank 75: halfway through the third
		{1, 0.004},
	} {
		if got := bucketQuantile(cum, 100, c.q); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("q%.2f = %g, want %g", c.q, got, c.want)
		}
	}
	// Everything in the first bucket: between 0 and its bound.
	if got := bucketQuantile(map[float64]uint64{0.01: 10}, 10, 0.5); got != 0.005 {
		t.Errorf("first bucket: %g, want 0.005", got)
	}
}

// stageRows is the difference of two scrapes, stage by stage, in the order
// a write passes them, leaving out stages nothing passed in between.
func TestStageRows(t *testing.T) {
	before := map[string]stageHist{
		"commit": {count: 10, sum: 0.010, buckets: map[float64]uint64{0.001: 10, 0.01: 10}},
	}
	after := map[string]stageHist{
		"commit": {count: 30, sum: 0.050, buckets: map[float64]uint64{0.001: 10, 0.01: 30}},
		"decode": {count: 20, sum: 0.0002, buckets: map[float64]uint64{0.001: 20, 0.01: 20}},
		"apply":  {count: 5, sum: 0.001, buckets: map[float64]uint64{0.001: 5, 0.01: 5}},
	}
	before["apply"] = after["apply"] // nothing applied in the window
	rows := stageRows(before, after)
	if len(rows) != 2 || rows[0].Stage != "decode" || rows[1].Stage != "commit" {
		t.Fatalf("rows %+v, want decode then commit", rows)
	}
	if r := rows[1]; r.Writes != 20 || math.Abs(r.MeanUs-2000) > 1e-6 || math.Abs(r.P50Us-5500) > 1e-6 {
		t.Errorf("commit row %+v, want 20 writes, mean 2000 µs, p50 5500 µs", r)
	}
	if stageRows(before, nil) != nil {
		t.Error("no rows without a second scrape")
	}
}

func TestParseWorkloads(t *testing.T) {
	w, err := parseWorkloads("scale,write")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"sessions", "storm", "fanout", "tree", "write"} {
		if !w[name] {
			t.Errorf("scale,write lacks %s: %v", name, w)
		}
	}
	if w["read"] {
		t.Errorf("scale,write includes read: %v", w)
	}
	_, err = parseWorkloads("storms")
	if err == nil || !strings.Contains(err.Error(), "storm, fanout, tree") {
		t.Errorf("unknown workload: %v", err)
	}
}
