package statuspage

import (
	"bytes"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The server-rendered page: the whole state as HTML, for readers without
// JavaScript and as the first view of those with it (app.js then keeps it
// current in the same markup).

func parsePage() *template.Template {
	funcs := template.FuncMap{
		"rfc": func(t time.Time) string {
			if t.IsZero() {
				return ""
			}
			return t.UTC().Format(time.RFC3339Nano)
		},
		"utc": func(t time.Time) string {
			if t.IsZero() {
				return "–"
			}
			return t.UTC().Format("2006-01-02 15:04:05Z")
		},
		"msTime": func(ms int64) string {
			if ms == 0 {
				return "0"
			}
			return time.UnixMilli(ms).UTC().Format("2006-01-02 15:04:05Z")
		},
		"ms":    func(ms int64) string { return formatDuration(time.Duration(ms) * time.Millisecond) },
		"inc":   func(i int) int { return i + 1 },
		"join":  strings.Join,
		"hex":   func(v int64) string { return "0x" + strconv.FormatUint(uint64(v), 16) },
		"perms": permString,
		"zone":  zoneName,
	}
	return template.Must(template.New("page.html").Funcs(funcs).ParseFS(assets, "assets/page.html"))
}

// pageData is what the template renders.
type pageData struct {
	State
	Now       time.Time
	Lock      *LockView
	LockError string
	Node      NodeView
	TreeError string
	ChartList []chart
	Crumbs    []crumb
}

// Age is how long ago t was, as the page writes it.
func (d pageData) Age(t time.Time) string {
	if t.IsZero() {
		return "–"
	}
	return formatDuration(d.Now.Sub(t))
}

// ChildPath is the path of the shown node's child name.
func (d pageData) ChildPath(name string) string {
	if d.Node.Path == "/" {
		return "/" + name
	}
	return d.Node.Path + "/" + name
}

type crumb struct{ Name, Path string }

func crumbsOf(p string) []crumb {
	out := []crumb{{Name: "/", Path: "/"}}
	if p == "/" {
		return out
	}
	acc := ""
	for _, part := range strings.Split(p[1:], "/") {
		acc += "/" + part
		out = append(out, crumb{Name: part + "/", Path: acc})
	}
	out[len(out)-1].Name = strings.TrimSuffix(out[len(out)-1].Name, "/")
	return out
}

// formatDuration writes d as the page does: "4.2s", "3m05s", "2h07m",
// "3d04h".
func formatDuration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch s := int64(d / time.Second); {
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	case d < time.Minute:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", s/3600, s%3600/60)
	default:
		return fmt.Sprintf("%dd%02dh", s/86400, s%86400/3600)
	}
}

// zoneName names the zone a schedule runs in: Local is the zone of the
// hosts that run it.
func zoneName(tz string) string {
	if tz == "Local" {
		return "the hosts' local time"
	}
	return tz
}

// permString writes ZooKeeper permission bits as zkCli does: cdrwa.
func permString(p int32) string {
	var b strings.Builder
	for _, x := range []struct {
		bit int32
		c   byte
	}{{4, 'c'}, {8, 'd'}, {1, 'r'}, {2, 'w'}, {16, 'a'}} {
		if p&x.bit != 0 {
			b.WriteByte(x.c)
		}
	}
	return b.String()
}

// chart is one small chart, drawn as an SVG polyline over the last
// chartSpan; app.js draws the same from the samples.
type chart struct {
	Key, Title string
	W, H       int
	Points     string
	Last, Max  string
}

// A chart spans the samples it has, at least a minute and at most
// chartSpan, so that a member just started draws more than a dot.
const chartSpan = 10 * time.Minute

func chartWindow(samples []Sample, now time.Time) time.Duration {
	if len(samples) == 0 {
		return chartSpan
	}
	return min(max(now.Sub(samples[0].At), time.Minute), chartSpan)
}

// chartMetrics are the charts, in order: the sample field's JSON name, and
// the title.
var chartMetrics = []struct{ key, title, unit string }{
	{"sessions", "Sessions", ""},
	{"znodes", "Znodes", ""},
	{"watches", "Watches", ""},
	{"rate", "Requests/s", ""},
	{"p99_ms", "p99 latency", " ms"},
}

func metricOf(s Sample, key string) float64 {
	switch key {
	case "sessions":
		return float64(s.Sessions)
	case "znodes":
		return float64(s.Znodes)
	case "watches":
		return float64(s.Watches)
	case "rate":
		return s.Rate
	case "p99_ms":
		return s.P99MS
	}
	return 0
}

func charts(samples []Sample, now time.Time) []chart {
	const w, h = 220, 48
	out := make([]chart, 0, len(chartMetrics))
	for _, m := range chartMetrics {
		c := chart{Key: m.key, Title: m.title, W: w, H: h, Last: "–", Max: "0" + m.unit}
		peak := 0.0
		for _, s := range samples {
			peak = math.Max(peak, metricOf(s, m.key))
		}
		scale := peak
		if scale <= 0 {
			scale = 1
		}
		var pts bytes.Buffer
		span := chartWindow(samples, now)
		start := now.Add(-span)
		for _, s := range samples {
			if s.At.Before(start) {
				continue
			}
			x := float64(w) * float64(s.At.Sub(start)) / float64(span)
			y := float64(h) - 1 - (float64(h)-2)*metricOf(s, m.key)/scale
			fmt.Fprintf(&pts, "%.1f,%.1f ", math.Min(x, w), y)
		}
		c.Points = strings.TrimSpace(pts.String())
		if len(samples) > 0 {
			c.Last = formatFigure(metricOf(samples[len(samples)-1], m.key)) + m.unit
		}
		c.Max = formatFigure(peak) + m.unit
		out = append(out, c)
	}
	return out
}

func formatFigure(f float64) string {
	if f == math.Trunc(f) && math.Abs(f) < 1e15 {
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'f', 2, 64)
}

func (s *Server) servePage(w http.ResponseWriter, r *http.Request) {
	q, err := parseQuery(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	code := http.StatusOK
	now := s.o.Now()
	d := pageData{State: s.state(r.Context()), Now: now}
	d.ServerTime = now.UTC()
	d.ChartList = charts(d.Charts, now)
	if name := q.Get("lock"); name != "" {
		if err := checkName(name); err != nil {
			d.LockError, code = err.Error(), http.StatusBadRequest
		} else if v, ok := s.lock(name); ok {
			d.Lock = &v
		} else {
			d.LockError, code = "no lock "+quote(name)+" under "+s.o.LockRoot, http.StatusNotFound
		}
	}
	p := "/"
	if vs, ok := q["path"]; ok {
		p = vs[0]
	}
	if err := checkPath(p); err != nil {
		d.TreeError, code, p = err.Error(), http.StatusBadRequest, "/"
	}
	d.Node = s.node(p)
	d.Crumbs = crumbsOf(p)
	var buf bytes.Buffer
	if err := s.page.Execute(&buf, d); err != nil {
		s.o.Log.Error("status page", "err", err)
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}
