package statuspage_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/internal/testkit"
)

// BenchmarkStatusPageStreams measures what open pages cost their member:
// a 3-member ensemble of the real binary takes a trickle of writes (20/s,
// so the indexes the page shows move), and the CPU time of member 1's
// process is read from /proc over a window, first with no page open,
// then with streams clients open on /api/events (what the page's
// EventSource does; the member sends each the same bytes whatever reads
// them). It reports % of one core for both and the difference.
//
// Not a test: it takes about a minute. Run it with make bench-web.
func BenchmarkStatusPageStreams(b *testing.B) {
	const streams = 20
	window := 20 * time.Second
	if d, err := time.ParseDuration(os.Getenv("COORDRUN_BENCH_WINDOW")); err == nil && d > 0 {
		window = d
	}
	bin, err := testkit.Binary(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	e := startBenchEnsemble(b, bin)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	c, err := client.Connect(ctx, client.Config{Servers: e.layout.ClientAddrs})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Create(ctx, "/bench", nil, 0, client.OpenACL); err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			_, _ = c.Set(ctx, "/bench", []byte(strconv.Itoa(i)), -1)
		}
	}()
	defer wg.Wait()
	defer cancel()

	pid := e.procs[0].Pid()
	idle := cpuShare(b, pid, window)

	var events atomic.Int64
	for range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.url(0)+"/api/events", nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return
			}
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(nil, 4<<20)
			for sc.Scan() {
				if strings.HasPrefix(sc.Text(), "data: ") {
					events.Add(1)
				}
			}
		}()
	}
	testkit.Poll(10*time.Second, func() bool { return events.Load() >= streams })
	before := events.Load()
	open := cpuShare(b, pid, window)
	got := events.Load() - before
	b.ReportMetric(idle, "%core-idle")
	b.ReportMetric(open, "%core-20streams")
	b.ReportMetric(open-idle, "%core-page")
	b.ReportMetric(float64(got)/window.Seconds()/streams, "events/s/stream")
	b.Logf("member 1 (pid %d): %.2f%% of a core without pages, %.2f%% with %d streams (%.1f events/s each): the page costs %.2f%%",
		pid, idle, open, streams, float64(got)/window.Seconds()/streams, open-idle)
}

type benchEnsemble struct {
	layout *testkit.ProcessEnsemble
	admin  []string
	procs  []*testkit.Process
}

func (e *benchEnsemble) url(i int) string { return "http://" + e.admin[i] }

func startBenchEnsemble(b *testing.B, bin string) *benchEnsemble {
	layout, err := testkit.NewProcessEnsemble(bin, "127.0.0.1", b.TempDir(), 3)
	if err != nil {
		b.Fatal(err)
	}
	layout.Args = testkit.RaftFlags()
	e := &benchEnsemble{layout: layout, admin: testkit.FreeAddrs(b, "127.0.0.1", 3)}
	for i := range 3 {
		p, err := layout.Start(i, &testkit.SyncBuffer{}, "--admin-addr", e.admin[i])
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(p.Kill)
		e.procs = append(e.procs, p)
	}
	if !testkit.Poll(30*time.Second, func() bool {
		resp, err := http.Get(e.url(0) + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}) {
		b.Fatal("the ensemble did not get ready")
	}
	return e
}

// cpuShare is the CPU time (user and system) process pid used over the
// next d, as % of one core.
func cpuShare(b *testing.B, pid int, d time.Duration) float64 {
	b.Helper()
	t0, c0 := time.Now(), cpuTicks(b, pid)
	<-time.After(d) // a measuring window, not a wait for a condition
	t1, c1 := time.Now(), cpuTicks(b, pid)
	// Linux reports in clock ticks of 1/100 s (USER_HZ) on every
	// architecture Go runs on.
	return float64(c1-c0) / 100 / t1.Sub(t0).Seconds() * 100
}

// cpuTicks is utime+stime of /proc/<pid>/stat.
func cpuTicks(b *testing.B, pid int) int64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	s := string(raw)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("/proc/%d/stat: %q", pid, s)
	}
	return utime + stime
}
