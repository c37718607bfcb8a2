package ensemble

import (
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/go-zookeeper/zk"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func withAdmin(cfg *Config) { cfg.AdminAddr = "127.0.0.1:0" }

var adminHTTP = &http.Client{Timeout: 10 * time.Second}

// adminGet fetches path from m's admin listener.
func adminGet(t *testing.T, m *Member, path string) (int, string) {
	t.Helper()
	resp, err := adminHTTP.Get("http://" + m.AdminAddr() + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, string(b)
}

// scrape is one parsed /metrics answer.
type scrape map[string]*dto.MetricFamily

func scrapeMetrics(t *testing.T, m *Member) scrape {
	t.Helper()
	code, body := adminGet(t, m, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", code, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mf, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parsing /metrics: %v\n%s", err, body)
	}
	return mf
}

// value is the gauge or counter value of the sample of name whose labels
// include labels (name=value pairs); ok is false if there is none.
func (s scrape) value(name string, labels ...string) (float64, bool) {
	mt := s.find(name, labels...)
	switch {
	case mt == nil:
		return 0, false
	case mt.Gauge != nil:
		return mt.Gauge.GetValue(), true
	case mt.Counter != nil:
		return mt.Counter.GetValue(), true
	}
	return 0, false
}

// count is the sample count of a histogram.
func (s scrape) count(name string, labels ...string) uint64 {
	if mt := s.find(name, labels...); mt != nil && mt.Histogram != nil {
		return mt.Histogram.GetSampleCount()
	}
	return 0
}

func (s scrape) find(name string, labels ...string) *dto.Metric {
	mf := s[name]
	if mf == nil {
		return nil
	}
next:
	for _, mt := range mf.Metric {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, lp := range mt.Label {
				if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		return mt
	}
	return nil
}

// TestMetrics does go-zookeeper operations on a member and finds them in
// its /metrics.
func TestMetrics(t *testing.T) {
	c := startCluster(t, 1, withAdmin)
	m := c.Member(0)
	if m.AdminAddr() == "" {
		t.Fatal("no admin address")
	}
	conn := testkit.DialZK(t, c.Servers(), 5*time.Second)

	const created = 5
	if _, err := conn.Create("/m", nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < created; i++ {
		if _, err := conn.Create(fmt.Sprintf("/m/n%d", i), []byte("x"), 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.Create("/m/eph", nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := conn.Get("/m/n1"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Set("/m/n1", []byte("y"), -1); err != nil {
		t.Fatal(err)
	}
	if _, _, err := conn.Children("/m"); err != nil {
		t.Fatal(err)
	}
	if err := conn.Delete("/m/n2", -1); err != nil {
		t.Fatal(err)
	}
	_, _, ev, err := conn.ExistsW("/m/later")
	if err != nil {
		t.Fatal(err)
	}

	// The watch is registered; then it fires.
	testkit.WaitFor(t, 10*time.Second, "a registered watch in /metrics", func() bool {
		v, _ := scrapeMetrics(t, m).value("coordrun_watches")
		return v >= 1
	})
	if _, err := conn.Create("/m/later", nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ev:
	case <-time.After(10 * time.Second):
		t.Fatal("no watch event")
	}

	// Replies reach the client just before the sequencer records them, so
	// the last ops may need a moment to show.
	wantOps := map[string]uint64{"create": created + 2, "getData": 1, "setData": 1, "getChildren2": 1, "delete": 1, "exists": 1}
	var s scrape
	var problems []string
	testkit.WaitFor(t, 10*time.Second, "the metrics to reflect the ops", func() bool {
		s = scrapeMetrics(t, m)
		problems = nil
		check := func(ok bool, format string, args ...any) {
			if !ok {
				problems = append(problems, fmt.Sprintf(format, args...))
			}
		}
		for op, n := range wantOps {
			got := s.count("coordrun_request_duration_seconds", "op", op)
			check(got >= n, "latency histogram op=%s: %d samples, want >= %d", op, got, n)
		}
		atLeast := func(name string, want float64, labels ...string) {
			v, ok := s.value(name, labels...)
			check(ok && v >= want, "%s%v = %v (present %v), want >= %v", name, labels, v, ok, want)
		}
		atLeast("coordrun_znodes", created+1) // /m/later; /m/eph; minus /m/n2; plus /zookeeper...
		atLeast("coordrun_ephemerals", 1)
		atLeast("coordrun_sessions", 1)
		atLeast("coordrun_client_connections", 1)
		atLeast("coordrun_raft_term", 1)
		atLeast("coordrun_raft_commit_index", 1)
		atLeast("coordrun_raft_applied_index", 1)
		atLeast("coordrun_last_zxid", float64(created+4))
		atLeast("coordrun_raft_state", 1, "state", "leader")
		atLeast("coordrun_client_received_bytes_total", 100)
		atLeast("coordrun_client_sent_bytes_total", 100)
		atLeast("coordrun_watch_notifications_total", 1)
		atLeast("coordrun_member_info", 1, "id", "1")
		v, _ := s.value("coordrun_raft_state", "state", "follower")
		check(v == 0, "raft_state follower = %v on the leader", v)
		check(s.count("coordrun_raft_log_store_duration_seconds") >= 1, "no raft log store timings")
		check(s.count("coordrun_notification_seconds") >= 1, "no notification timings, though a watch fired")
		out, ok := s.value("coordrun_outstanding_requests")
		check(ok && out == 0, "outstanding requests %v (present %v) when idle", out, ok)
		return len(problems) == 0
	})
	if n := s.count("coordrun_request_duration_seconds", "op", "unknown"); n != 0 {
		t.Errorf("%d requests counted as op=unknown", n)
	}

	if code, body := adminGet(t, m, "/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	if code, body := adminGet(t, m, "/readyz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/readyz: %d %q", code, body)
	}
	if code, _ := adminGet(t, m, "/nope"); code != http.StatusNotFound {
		t.Errorf("/nope: %d, want 404", code)
	}
	if code, _ := adminGet(t, m, "/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("/debug/pprof/ without Pprof: %d, want 404", code)
	}

	// Close stops the admin listener.
	addr := m.AdminAddr()
	c.Stop(0)
	if resp, err := adminHTTP.Get("http://" + addr + "/healthz"); err == nil {
		resp.Body.Close()
		t.Errorf("admin listener still answers after Close: %d", resp.StatusCode)
	}
}

// TestAdminPprof: with Pprof the admin listener serves Go's profiles.
func TestAdminPprof(t *testing.T) {
	c := startCluster(t, 1, withAdmin, func(cfg *Config) { cfg.Pprof = true })
	m := c.Member(0)
	if code, body := adminGet(t, m, "/debug/pprof/goroutine?debug=1"); code != http.StatusOK || !strings.Contains(body, "goroutine profile:") {
		t.Errorf("/debug/pprof/goroutine: %d %.80q", code, body)
	}
	if code, _ := adminGet(t, m, "/debug/pprof/heap"); code != http.StatusOK {
		t.Errorf("/debug/pprof/heap: %d", code)
	}
}

// TestAdminOffByDefault: no AdminAddr, no listener; the registry is still
// there for programs that embed a member.
func TestAdminOffByDefault(t *testing.T) {
	c := startCluster(t, 1)
	m := c.Member(0)
	if a := m.AdminAddr(); a != "" {
		t.Fatalf("AdminAddr() = %q without Config.AdminAddr", a)
	}
	mfs, err := m.Metrics().Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		found = found || mf.GetName() == "coordrun_raft_term"
	}
	if !found {
		t.Fatal("coordrun_raft_term missing from Metrics()")
	}
}

// TestAdminHealthLostQuorum: every member of a 3-member ensemble is ready;
// the one left after two stop turns not ready (503 with a reason) but
// stays healthy: the process still serves.
func TestAdminHealthLostQuorum(t *testing.T) {
	c := startCluster(t, 3, withAdmin)
	for i, m := range c.Members() {
		testkit.WaitFor(t, 10*time.Second, fmt.Sprintf("member %d ready", i+1), func() bool {
			code, _ := adminGet(t, m, "/readyz")
			return code == http.StatusOK
		})
	}
	// Keep the leader: it must notice on its own that it lost the quorum.
	keep := c.Leader()
	if keep < 0 {
		t.Fatal("no leader")
	}
	for i := range c.N() {
		if i != keep {
			c.Stop(i)
		}
	}
	m := c.Member(keep)
	var code int
	var body string
	testkit.WaitFor(t, 15*time.Second, "/readyz 503 on the member without quorum", func() bool {
		code, body = adminGet(t, m, "/readyz")
		return code == http.StatusServiceUnavailable
	})
	if strings.Count(body, "\n") != 1 || !strings.HasSuffix(body, "\n") || len(body) < 5 {
		t.Errorf("/readyz 503 body %q: want a one-line reason", body)
	}
	t.Logf("/readyz: %d %s", code, strings.TrimSpace(body))
	if code, body := adminGet(t, m, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz without quorum: %d %q, want 200", code, body)
	}
	s := scrapeMetrics(t, m)
	if v, _ := s.value("coordrun_raft_state", "state", "leader"); v != 0 {
		t.Errorf("raft_state leader = %v after losing the quorum", v)
	}
}

// TestAdminHealthTLSClientPort: with client certificates required on the
// client port the liveness check cannot ask ruok; it must still pass, and
// must not knock on the port in plaintext (which logs a warning each time).
func TestAdminHealthTLSClientPort(t *testing.T) {
	ca := testkit.NewCA(t, "coordrun test client-port CA")
	logs := &testkit.SyncBuffer{}
	c := startCluster(t, 1, withAdmin, func(cfg *Config) {
		cfg.ClientTLS = &tls.Config{
			Certificates: []tls.Certificate{ca.Issue(t, testkit.Loopback("member "+cfg.ID))},
			ClientCAs:    ca.Pool,
		}
		cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	m := c.Member(0)
	for i := 0; i < 3; i++ {
		if code, body := adminGet(t, m, "/healthz"); code != http.StatusOK {
			t.Fatalf("/healthz with a TLS client port: %d %q", code, body)
		}
	}
	if code, body := adminGet(t, m, "/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz with a TLS client port: %d %q", code, body)
	}
	if logs.HasLine("TLS") {
		t.Fatalf("the health check touched the TLS client port:\n%s", logs.String())
	}
}

// histSum is the sample count and sum of a histogram's series.
func (s scrape) hist(name string, labels ...string) (uint64, float64) {
	if mt := s.find(name, labels...); mt != nil && mt.Histogram != nil {
		return mt.Histogram.GetSampleCount(), mt.Histogram.GetSampleSum()
	}
	return 0, 0
}

// TestWriteStages: the stage histogram accounts for every write, on the
// member that holds its connection (decode, propose, then commit and apply
// on the leader or forward and own_apply on a follower, sequence, write)
// and on the leader for the writes it proposes for followers; and the
// stages of a write, added up, are the time from reading it to queueing
// its reply, which coordrun_request_duration_seconds measures.
func TestWriteStages(t *testing.T) {
	c := startCluster(t, 3, withAdmin)
	li := c.WaitLeader(t)
	fi := (li + 1) % 3
	leader, follower := c.Member(li), c.Member(fi)
	const n = 20
	type delta struct{ before, after scrape }
	stage := func(d delta, name string) (uint64, float64) {
		n0, s0 := d.before.hist("coordrun_write_stage_seconds", "stage", name)
		n1, s1 := d.after.hist("coordrun_write_stage_seconds", "stage", name)
		return n1 - n0, s1 - s0
	}
	setData := func(d delta) (uint64, float64) {
		n0, s0 := d.before.hist("coordrun_request_duration_seconds", "op", "setData")
		n1, s1 := d.after.hist("coordrun_request_duration_seconds", "op", "setData")
		return n1 - n0, s1 - s0
	}
	// run does n setData on conn and returns the scrapes of the member
	// before and after, once its metrics show all n.
	run := func(conn *zk.Conn, p string, ms ...*Member) []delta {
		if _, err := conn.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Sync(p); err != nil {
			t.Fatal(err)
		}
		ds := make([]delta, len(ms))
		for i, m := range ms {
			ds[i].before = scrapeMetrics(t, m)
		}
		for i := 0; i < n; i++ {
			if _, err := conn.Set(p, []byte{byte(i)}, -1); err != nil {
				t.Fatal(err)
			}
		}
		testkit.WaitFor(t, 10*time.Second, "the writes in the metrics", func() bool {
			ds[0].after = scrapeMetrics(t, ms[0])
			got, _ := setData(ds[0])
			return got == n
		})
		for i := 1; i < len(ms); i++ {
			ds[i].after = scrapeMetrics(t, ms[i])
		}
		return ds
	}
	counts := func(who string, d delta, want map[string]uint64) {
		t.Helper()
		for name, w := range want {
			if got, _ := stage(d, name); got != w {
				t.Errorf("%s: stage %s counted %d writes, want %d", who, name, got, w)
			}
		}
	}
	// covers checks that the stages add up to the request time: exactly,
	// but for the call of raft.Apply, which both the propose and the
	// commit stage contain, so never less (0.1 % for float sums).
	covers := func(who string, d delta, stages ...string) {
		t.Helper()
		_, req := setData(d)
		var sum float64
		var parts []string
		for _, s := range stages {
			_, v := stage(d, s)
			sum += v
			parts = append(parts, fmt.Sprintf("%s %.0fµs", s, v/n*1e6))
		}
		t.Logf("%s: per write %s; request %.0fµs", who, strings.Join(parts, ", "), req/n*1e6)
		if req <= 0 || sum < 0.999*req || sum > 1.25*req {
			t.Errorf("%s: stages %v add up to %.6fs, the requests took %.6fs", who, stages, sum, req)
		}
	}

	ld := run(testkit.DialZK(t, []string{c.ClientAddr(li)}, 5*time.Second), "/on-leader", leader)[0]
	counts("leader", ld, map[string]uint64{"decode": n, "propose": n, "commit": n, "apply": n, "sequence": n, "forward": 0, "own_apply": 0})
	if w, _ := stage(ld, "write"); w < 1 || w > n {
		t.Errorf("leader: %d write batches for %d replies", w, n)
	}
	covers("leader", ld, "decode", "propose", "commit", "apply", "sequence")

	// A follower's connection with a watch waits for its own apply.
	fc := testkit.DialZK(t, []string{c.ClientAddr(fi)}, 5*time.Second)
	if _, _, _, err := fc.ExistsW("/watched"); err != nil {
		t.Fatal(err)
	}
	ds := run(fc, "/on-follower", follower, leader)
	fd := ds[0]
	counts("follower", fd, map[string]uint64{"decode": n, "propose": n, "forward": n, "sequence": n, "commit": 0, "apply": 0})
	if a, _ := stage(fd, "own_apply"); a > n {
		t.Errorf("follower: own_apply counted %d times for %d writes", a, n)
	}
	covers("follower", fd, "decode", "propose", "forward", "own_apply", "sequence")
	counts("leader, for the follower's writes", ds[1], map[string]uint64{"commit": n, "apply": n, "decode": 0, "forward": 0})
}
