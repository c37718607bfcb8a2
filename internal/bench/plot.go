package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// plot draws the headline as grouped bars, one group per workload and one
// bar per system, in six panels: throughput, p50 and p99 latency of the
// key-value workloads, lock handoffs/s and handoff p50, and the recovery
// times. The file's extension (.svg or .png) picks the format.
func (rep *compareReport) plot(path string) error {
	systems := rep.systemNames()
	isKV := func(r metricRow) bool {
		for _, x := range rep.KV {
			if r.Workload == fmt.Sprintf("%s x%d", x.Workload, x.Clients) {
				return true
			}
		}
		return false
	}
	isLock := func(r metricRow) bool {
		for _, x := range rep.Locks {
			if r.Workload == fmt.Sprintf("%s x%d", x.Workload, x.Waiters) {
				return true
			}
		}
		return false
	}
	pick := func(metric string, in func(metricRow) bool) []metricRow {
		var out []metricRow
		for _, r := range rep.Headline {
			if r.Metric == metric && in(r) {
				out = append(out, r)
			}
		}
		return out
	}
	var recovery []metricRow
	for _, r := range rep.Headline {
		switch r.Metric {
		case "kill→holder ms", "writes resume ms", "first write ms":
			r.Workload = strings.Replace(r.Workload, "leader killed", "failover", 1)
			recovery = append(recovery, r)
		}
	}
	panels := []struct {
		title string
		rows  []metricRow
	}{
		{"throughput, ops/s", pick("ops/s", isKV)},
		{"lock handoffs/s", pick("handoffs/s", isLock)},
		{"latency p50, ms", pick("p50 ms", isKV)},
		{"lock handoff p50, ms", pick("p50 ms", isLock)},
		{"latency p99, ms", pick("p99 ms", isKV)},
		{"recovery, ms (crash: kill to next holder)", recovery},
	}
	grid := make([][]*plot.Plot, 3)
	for i, pn := range panels {
		p, err := barPanel(pn.title, pn.rows, systems)
		if err != nil {
			return err
		}
		grid[i/2] = append(grid[i/2], p)
	}
	const w, h = 16 * vg.Inch, 13 * vg.Inch
	var c vg.CanvasWriterTo
	switch strings.ToLower(filepath.Ext(path)) {
	case ".png":
		c = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(96))}
	case ".svg":
		c = vgsvg.New(w, h)
	default:
		return fmt.Errorf("%s: want a .svg or .png file", path)
	}
	dc := draw.New(c)
	tiles := draw.Tiles{Rows: 3, Cols: 2, PadTop: vg.Points(10), PadBottom: vg.Points(10), PadLeft: vg.Points(10), PadRight: vg.Points(10), PadX: vg.Points(30), PadY: vg.Points(30)}
	canvases := plot.Align(grid, tiles, dc)
	for i := range grid {
		for j, p := range grid[i] {
			p.Draw(canvases[i][j])
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// barPanel is one panel: a group of bars per row, a bar per system.
func barPanel(title string, rows []metricRow, systems []string) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.Legend.Top = true
	p.Y.Min = 0
	if len(rows) == 0 {
		p.Title.Text += " (not run)"
		return p, nil
	}
	var present []string
	for _, s := range systems {
		for _, r := range rows {
			if _, ok := r.Values[s]; ok {
				present = append(present, s)
				break
			}
		}
	}
	barW := vg.Points(min(60/float64(max(1, len(present))), 14))
	for j, s := range present {
		vals := make(plotter.Values, len(rows))
		for i, r := range rows {
			vals[i] = max(0, r.Values[s]) // a missing system draws no bar
		}
		b, err := plotter.NewBarChart(vals, barW)
		if err != nil {
			return nil, err
		}
		b.LineStyle.Width = 0
		b.Color = plotutil.Color(colorIndex(s))
		b.Offset = vg.Length(float64(j)-float64(len(present)-1)/2) * barW
		p.Add(b)
		p.Legend.Add(s, b)
	}
	var labels []string
	for _, r := range rows {
		labels = append(labels, r.Workload)
	}
	p.NominalX(labels...)
	p.X.Tick.Label.Rotation = 0.35
	p.X.Tick.Label.XAlign = draw.XRight
	return p, nil
}

// colorIndex keeps a system's colour the same in every panel.
func colorIndex(s string) int {
	for i, x := range allSystems {
		if x == s {
			return i
		}
	}
	return len(allSystems)
}
