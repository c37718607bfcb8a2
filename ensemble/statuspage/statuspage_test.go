package statuspage

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/coordrun/coordrun/supervisor/state"
)

var fixedNow = time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)

// lockFixture is a lock "nightly" held by web-1 with web-2 and web-3
// waiting (joined in that order), a lock "stale" whose holder's node is
// not ephemeral, a closed lock "secret", and a cron job "report".
func lockFixture(t testing.TB) (*fakeSource, *Server) {
	t.Helper()
	f := newFakeSource()
	at := func(min int) time.Time { return fixedNow.Add(-time.Duration(min) * time.Minute) }
	info := func(host string, pid int, since time.Time) state.HolderInfo {
		return state.HolderInfo{Host: host, PID: pid, User: "ops", Command: "/usr/local/bin/nightly.sh", Since: since}
	}
	f.put("/coordrun/locks/nightly", []byte("held lock-aa-0000000001"), 0)
	holder := f.putJSON("/coordrun/locks/nightly/lock-aa-0000000001", info("web-1", 101, at(30)), 0x100)
	// Sequence order, not name order: web-3's id sorts first.
	f.putJSON("/coordrun/locks/nightly/lock-zz-0000000002", info("web-2", 202, at(20)), 0x200)
	f.putJSON("/coordrun/locks/nightly/lock-00-0000000003", info("web-3", 303, at(10)), 0x300)
	f.putJSON("/coordrun/locks/nightly/run", state.RunInfo{Node: "lock-aa-0000000001", Token: holder.stat.Czxid, HolderInfo: info("web-1", 101, at(25))}, 0x100)

	f.put("/coordrun/locks/stale", []byte("held lock-bb-0000000001"), 0)
	stale := f.putJSON("/coordrun/locks/stale/lock-bb-0000000001", info("db-1", 9, at(90)), 0)
	f.putJSON("/coordrun/locks/stale/run", state.RunInfo{Node: "lock-bb-0000000001", Token: stale.stat.Czxid, HolderInfo: info("db-1", 9, at(90))}, 0)

	f.put("/coordrun/locks/secret", []byte("held lock-cc-0000000001"), 0).closed = true

	f.putJSON("/coordrun/cron/report", state.CronJobInfo{Name: "report", Schedule: "0 3 * * *", TZ: "Europe/Berlin", Command: []string{"/usr/bin/report", "--all"}, Overlap: "skip"}, 0)
	exit0, exit1 := 0, 1
	f.putJSON("/coordrun/cron/report/firings/"+firingName(at(24*60)), state.FiringRecord{Scheduled: at(24 * 60), State: "done", Host: "web-2", Token: 777,
		Start: at(24 * 60), End: at(24*60 - 2), ExitCode: &exit1, Output: "disk full\n", OutputBytes: 10}, 0)
	f.putJSON("/coordrun/cron/report/firings/"+firingName(at(60)), state.FiringRecord{Scheduled: at(60), State: "done", Host: "web-1", Token: 901,
		Start: at(60), End: at(59), ExitCode: &exit0}, 0)
	f.putJSON("/coordrun/cron/report/hosts/web-1", info("web-1", 1001, at(300)), 0x400)

	f.put("/app/config", []byte(`{"replicas":3,"mode":"fast"}`), 0)
	f.put("/app/blob", []byte{0, 1, 2, 0xff, 'x'}, 0)
	f.put("/app/private", []byte("s3cret"), 0).closed = true

	s := New(f, Options{Now: func() time.Time { return fixedNow }})
	return f, s
}

// firingName names a firing's record as the supervisor does.
func firingName(t time.Time) string { return fmt.Sprintf("%013d", t.Unix()) }

func get(t *testing.T, h http.Handler, target string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, target, nil)
	r.RemoteAddr = "127.0.0.1:40000"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func getJSON[T any](t *testing.T, h http.Handler, target string, code int) T {
	t.Helper()
	w := get(t, h, target)
	if w.Code != code {
		t.Fatalf("GET %s: %d %s, want %d", target, w.Code, w.Body.String(), code)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("GET %s: Content-Type %q", target, ct)
	}
	var v T
	if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil {
		t.Fatalf("GET %s: %v: %s", target, err, w.Body.String())
	}
	return v
}

func TestAPIEnsemble(t *testing.T) {
	f, s := lockFixture(t)
	h := s.Handler()
	v := getJSON[EnsembleView](t, h, "/api/ensemble", 200)
	if v.Health != HealthHealthy || v.Leader != "1" || len(v.Members) != 3 {
		t.Fatalf("ensemble %+v", v)
	}
	if m := v.Members[1]; m.ID != "2" || m.Lag != 1 || !m.Reachable || m.Leader {
		t.Errorf("member 2: %+v", m)
	}
	if !v.Members[0].Leader || !v.Members[0].Self {
		t.Errorf("member 1 not marked leader and self: %+v", v.Members[0])
	}

	f.mu.Lock()
	f.reports[2] = MemberReport{ID: "3", PeerAddr: "127.0.0.1:2890", Role: "unreachable", Error: "dial tcp 127.0.0.1:2890: connect: connection refused"}
	f.mu.Unlock()
	v = getJSON[EnsembleView](t, h, "/api/ensemble", 200)
	if v.Health != HealthDegraded || !strings.Contains(v.Reason, "unreachable: 3") || v.Members[2].Reachable || v.Members[2].Error == "" {
		t.Errorf("one member down: %+v", v)
	}
	f.mu.Lock()
	f.reports[1] = MemberReport{ID: "2", PeerAddr: "127.0.0.1:2889", Role: "unreachable", Error: "refused"}
	f.mu.Unlock()
	if v = getJSON[EnsembleView](t, h, "/api/ensemble", 200); v.Health != HealthUnavailable {
		t.Errorf("two of three down: %+v", v)
	}
}

func TestAPILocks(t *testing.T) {
	f, s := lockFixture(t)
	h := s.Handler()
	v := getJSON[LocksView](t, h, "/api/locks", 200)
	byName := map[string]LockView{}
	for _, l := range v.Locks {
		byName[l.Name] = l
	}
	n := byName["nightly"]
	if n.Holder == nil || n.Holder.Host != "web-1" || n.Holder.PID != 101 || n.Holder.Token == 0 || n.Holder.Session != "0x100" ||
		!n.Holder.Since.Equal(fixedNow.Add(-25*time.Minute)) {
		t.Fatalf("nightly holder %+v", n.Holder)
	}
	if len(n.Waiting) != 2 || n.Waiting[0].Host != "web-2" || n.Waiting[1].Host != "web-3" || n.Queued != 3 {
		t.Fatalf("nightly queue %+v, want web-2 then web-3", n.Waiting)
	}
	if n.Lingering != "" {
		t.Errorf("nightly flagged %q", n.Lingering)
	}
	if st := byName["stale"]; !strings.Contains(st.Lingering, "not ephemeral") {
		t.Errorf("stale lock not flagged: %+v", st)
	}
	if sec := byName["secret"]; !strings.Contains(sec.Error, "not readable") || sec.Holder != nil {
		t.Errorf("closed lock shown: %+v", sec)
	}

	// The leader knows web-1's session has been silent: lingering.
	f.mu.Lock()
	f.silent[0x100] = SessionState{Tracked: true, Silent: 3500 * time.Millisecond, Timeout: 4 * time.Second}
	f.mu.Unlock()
	if l := getJSON[LockView](t, h, "/api/locks/nightly", 200); !strings.Contains(l.Lingering, "silent for 3.5s") {
		t.Errorf("silent holder not flagged: %q", l.Lingering)
	}

	// A new holder: the old one is in the history, with its token.
	old := n.Holder.Token
	f.remove("/coordrun/locks/nightly/lock-aa-0000000001")
	f.putJSON("/coordrun/locks/nightly/run", state.RunInfo{Node: "lock-zz-0000000002", Token: n.Waiting[0].Token,
		HolderInfo: state.HolderInfo{Host: "web-2", PID: 202, Since: fixedNow}}, 0x200)
	f.put("/coordrun/locks/nightly", []byte("held lock-zz-0000000002"), 0)
	l := getJSON[LockView](t, h, "/api/locks/nightly", 200)
	if l.Holder == nil || l.Holder.Host != "web-2" || l.Holder.Token <= old || len(l.Waiting) != 1 {
		t.Fatalf("after the handoff: %+v", l)
	}
	if len(l.History) < 2 || l.History[0].Node != "lock-zz-0000000002" || l.History[1].Token != old || l.History[1].Gone.IsZero() {
		t.Errorf("history %+v", l.History)
	}
	getJSON[map[string]string](t, h, "/api/locks/nope", 404)
}

func TestAPICron(t *testing.T) {
	_, s := lockFixture(t)
	v := getJSON[CronView](t, s.Handler(), "/api/cron", 200)
	if len(v.Jobs) != 1 {
		t.Fatalf("jobs %+v", v)
	}
	j := v.Jobs[0]
	// 03:00 Berlin is 02:00 UTC in December; it is 06:00 UTC now.
	if want := time.Date(2026, 12, 3, 2, 0, 0, 0, time.UTC); !j.Next.Equal(want) || j.TZ != "Europe/Berlin" || !strings.HasPrefix(j.NextInZone, "2026-12-03 03:00:00") {
		t.Errorf("next %v in %s (%s), want %v", j.Next, j.TZ, j.NextInZone, want)
	}
	if len(j.Hosts) != 1 || j.Hosts[0].Host != "web-1" {
		t.Errorf("hosts %+v", j.Hosts)
	}
	if len(j.Firings) != 2 {
		t.Fatalf("firings %+v", j.Firings)
	}
	if f := j.Firings[0]; f.State != "done" || f.Result != "failed" || f.Host != "web-2" || f.Output != "disk full\n" || f.DurationMS != 120000 || f.ExitCode == nil || *f.ExitCode != 1 {
		t.Errorf("failed firing %+v", f)
	}
	if f := j.Firings[1]; f.Result != "done" || f.Token != 901 || f.DurationMS != 60000 {
		t.Errorf("firings %+v", j.Firings)
	}
	getJSON[CronJob](t, s.Handler(), "/api/cron/report", 200)
	getJSON[map[string]string](t, s.Handler(), "/api/cron/none", 404)
}

func TestAPITree(t *testing.T) {
	_, s := lockFixture(t)
	h := s.Handler()
	root := getJSON[NodeView](t, h, "/api/tree", 200)
	if root.Path != "/" || strings.Join(root.Children, ",") != "app,coordrun" {
		t.Errorf("root %+v", root)
	}
	cfg := getJSON[NodeView](t, h, "/api/tree?path=/app/config", 200)
	if cfg.Text == "" || !strings.Contains(cfg.JSON, "\n  \"replicas\": 3") || cfg.Hex == "" || cfg.Parent != "/app" || cfg.Stat == nil {
		t.Errorf("config %+v", cfg)
	}
	blob := getJSON[NodeView](t, h, "/api/tree?path=/app/blob", 200)
	if blob.Text != "" || blob.JSON != "" || !strings.Contains(blob.Hex, "00 01 02 ff 78") {
		t.Errorf("blob %+v", blob)
	}
	priv := getJSON[NodeView](t, h, "/api/tree?path=/app/private", 200)
	if priv.Data != nil || priv.Text != "" || !strings.Contains(priv.DataError, "not readable") || !strings.Contains(priv.ACLError, "not readable") {
		t.Errorf("private node shown: %+v", priv)
	}
	if w := get(t, h, "/?path=/app/private"); w.Code != 200 || strings.Contains(w.Body.String(), "s3cret") || !strings.Contains(w.Body.String(), "not readable") {
		t.Errorf("page of the private node: %d, secret shown or no notice", w.Code)
	}
	getJSON[NodeView](t, h, "/api/tree?path=/app/none", 404)
}

func TestAPIBadParameters(t *testing.T) {
	_, s := lockFixture(t)
	h := s.Handler()
	for _, target := range []string{
		"/api/tree?path=", "/api/tree?path=app", "/api/tree?path=/app/", "/api/tree?path=//app", "/api/tree?path=/a/../b",
		"/api/tree?path=/a%00b", "/api/tree?path=/a&path=/b", "/api/tree?depth=3", "/api/tree?path=%zz",
		"/api/tree?path=/" + strings.Repeat("x", maxPath), "/api/locks?x=1", "/api/locks/a%2Fb", "/api/locks/a%00b",
		"/api/cron/a%2F..", "/api/state?verbose", "/api/events?since=1", "/api/ensemble?a=b",
	} {
		w := get(t, h, target)
		var body struct{ Error string }
		if w.Code != 400 || json.Unmarshal(w.Body.Bytes(), &body) != nil || body.Error == "" {
			t.Errorf("GET %s: %d %q, want 400 with a message", target, w.Code, w.Body.String())
		}
	}
	if w := get(t, h, "/api/nothing"); w.Code != 404 || !strings.Contains(w.Body.String(), "no such endpoint") {
		t.Errorf("unknown endpoint: %d %s", w.Code, w.Body.String())
	}
	r := httptest.NewRequest(http.MethodPost, "/api/locks", strings.NewReader("{}"))
	r.RemoteAddr = "127.0.0.1:1"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", w.Code)
	}
	if w := get(t, h, "/?path=nope"); w.Code != 400 || !strings.Contains(w.Body.String(), "must start with /") {
		t.Errorf("page with a bad path: %d", w.Code)
	}
}

func TestRefusesRemoteClients(t *testing.T) {
	_, s := lockFixture(t)
	for _, target := range []string{"/", "/api/state", "/api/tree?path=/", "/assets/app.js", "/api/events"} {
		r := httptest.NewRequest(http.MethodGet, target, nil)
		r.RemoteAddr = "192.0.2.7:51000"
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, r)
		if w.Code != http.StatusForbidden || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain") ||
			!strings.Contains(w.Body.String(), "--admin-allow") {
			t.Errorf("GET %s from 192.0.2.7: %d %q, want 403 and a plain message", target, w.Code, w.Body.String())
		}
	}
	allowed := New(newFakeSource(), Options{Allowed: func(remote string) bool { return strings.HasPrefix(remote, "192.0.2.") }})
	r := httptest.NewRequest(http.MethodGet, "/api/ensemble", nil)
	r.RemoteAddr = "192.0.2.7:51000"
	w := httptest.NewRecorder()
	allowed.Handler().ServeHTTP(w, r)
	if w.Code != 200 {
		t.Errorf("allowed remote: %d", w.Code)
	}
}

func TestPageStatic(t *testing.T) {
	_, s := lockFixture(t)
	h := s.Handler()
	w := get(t, h, "/?lock=nightly")
	body := w.Body.String()
	if w.Code != 200 || w.Header().Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("page: %d %s", w.Code, w.Header().Get("Content-Type"))
	}
	for _, want := range []string{
		`class="health h-healthy"`, `data-id="1" data-role="leader"`, `<span class="badge lead">leader</span>`,
		`data-host="web-1" data-pid="101"`, `data-pos="1" data-host="web-2"`, `data-pos="2" data-host="web-3"`,
		`Recent holders of nightly`, `lingering`, `data-job="report"`, `data-state="done" data-result="failed" data-host="web-2"`,
		`disk full`, `<noscript><meta http-equiv="refresh"`, `src="/assets/app.js"`, `polyline points=`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Index(body, `data-host="web-2"`) > strings.Index(body, `data-host="web-3"`) {
		t.Error("waiters out of order")
	}
	if csp := w.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
		t.Errorf("CSP %q", csp)
	}
	for _, a := range []string{"/assets/app.js", "/assets/style.css"} {
		if w := get(t, h, a); w.Code != 200 || w.Body.Len() < 1000 {
			t.Errorf("%s: %d, %d bytes", a, w.Code, w.Body.Len())
		}
	}
	if w := get(t, h, "/assets/"); w.Code != 404 {
		t.Errorf("asset listing: %d", w.Code)
	}
	if w := get(t, h, "/?lock=none"); w.Code != 404 || !strings.Contains(w.Body.String(), "no lock") {
		t.Errorf("page of a missing lock: %d", w.Code)
	}
}

// TestEventStream: a stream sends the state at once, then each change.
func TestEventStream(t *testing.T) {
	f, _ := lockFixture(t)
	s := New(f, Options{Interval: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/api/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	states := make(chan State, 16)
	go func() {
		defer close(states)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var st State
				if json.Unmarshal([]byte(data), &st) == nil {
					states <- st
				}
			}
		}
	}()
	first := testkit.Recv(t, states, 5*time.Second, "the first state")
	if first.ServerTime.IsZero() || first.Member != "1" || len(first.Locks.Locks) != 3 {
		t.Fatalf("first state %+v", first)
	}
	f.putJSON("/coordrun/locks/nightly/lock-ab-0000000009", state.HolderInfo{Host: "web-9", PID: 9}, 0x900)
	deadline := time.After(5 * time.Second)
	for {
		select {
		case st, ok := <-states:
			if !ok {
				t.Fatal("stream ended")
			}
			for _, l := range st.Locks.Locks {
				if l.Name == "nightly" && len(l.Waiting) == 3 && l.Waiting[2].Host == "web-9" {
					return
				}
			}
		case <-deadline:
			t.Fatal("no state with the new waiter")
		}
	}
}

// TestEventStreamsEndWithRun: streams end when Run does, so that the
// member's Close is not held up by open pages.
func TestEventStreamsEndWithRun(t *testing.T) {
	s := New(newFakeSource(), Options{Interval: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/api/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	cancel()
	<-done
	ended := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, resp.Body); ended <- err }()
	testkit.Recv(t, ended, 5*time.Second, "the stream's end")
}

func TestQuantile(t *testing.T) {
	b := func(counts ...uint64) []Bucket {
		les := []float64{0.001, 0.01, 0.1, math.Inf(1)}
		out := make([]Bucket, len(counts))
		for i, c := range counts {
			out[i] = Bucket{Le: les[i], Count: c}
		}
		return out
	}
	for _, c := range []struct {
		before, after []Bucket
		want          float64
	}{
		{nil, b(0, 0, 0, 0), 0},
		{nil, b(100, 100, 100, 100), 0.00099},
		{b(100, 100, 100, 100), b(100, 200, 200, 200), 0.0099 + 0.001*0.01},
		{nil, b(0, 0, 90, 100), 0.1},
		{b(5, 5, 5), b(1, 2, 3, 4), 0},
	} {
		if got := quantile(0.99, c.before, c.after); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("quantile(%v → %v) = %v, want %v", c.before, c.after, got, c.want)
		}
	}
	s := newSamples(3)
	for i := range 5 {
		s.add(fixedNow.Add(time.Duration(i)*5*time.Second), Counters{Sessions: i, Requests: int64(i * 50)})
	}
	all := s.all(fixedNow.Add(25*time.Second), Counters{Sessions: 7, Requests: 300})
	if len(all) != 4 || all[0].Sessions != 2 || all[2].Sessions != 4 || all[2].Rate != 10 || all[3].Sessions != 7 || all[3].Rate != 20 {
		t.Errorf("ring %+v", all)
	}
}

func TestNextFiring(t *testing.T) {
	now := time.Date(2026, 12, 2, 6, 0, 7, 0, time.UTC)
	for _, c := range []struct {
		spec, tz string
		want     time.Time
		zone     string
	}{
		{"@every 10s", "", time.Date(2026, 12, 2, 6, 0, 10, 0, time.UTC), "Local"},
		{"*/15 * * * * *", "UTC", time.Date(2026, 12, 2, 6, 0, 15, 0, time.UTC), "UTC"},
		{"CRON_TZ=America/New_York 30 6 * * *", "", time.Date(2026, 12, 2, 11, 30, 0, 0, time.UTC), "America/New_York"},
		{"@daily", "Asia/Tokyo", time.Date(2026, 12, 2, 15, 0, 0, 0, time.UTC), "Asia/Tokyo"},
	} {
		got, loc, err := nextFiring(c.spec, c.tz, now)
		if err != nil || !got.Equal(c.want) || loc.String() != c.zone {
			t.Errorf("nextFiring(%q, %q) = %v in %v, %v; want %v in %s", c.spec, c.tz, got, loc, err, c.want, c.zone)
		}
	}
	// The page reads schedules as the supervisor does: an @every that is
	// not a whole number of seconds is refused by both.
	for _, bad := range []string{"", "61 * * * *", "@every 0s", "@every soon", "@every 1500ms", "@every 90500ms"} {
		if _, _, err := nextFiring(bad, "", now); err == nil {
			t.Errorf("nextFiring(%q): no error", bad)
		}
	}
}

// warnedSource is a fake member with a standing warning.
type warnedSource struct{ *fakeSource }

func (warnedSource) Warning() string { return "The peer port is unauthenticated <sic>" }

// TestPageWarning: a Source's standing warning is one banner on the page,
// escaped; without one there is none.
func TestPageWarning(t *testing.T) {
	opts := Options{Now: func() time.Time { return fixedNow }}
	body := get(t, New(warnedSource{newFakeSource()}, opts).Handler(), "/").Body.String()
	if n := strings.Count(body, `role="alert"`); n != 1 || !strings.Contains(body, "unauthenticated &lt;sic&gt;") {
		t.Fatalf("%d banners; page:\n%s", n, body)
	}
	if body := get(t, New(newFakeSource(), opts).Handler(), "/").Body.String(); strings.Contains(body, `role="alert"`) {
		t.Fatal("a banner without a warning")
	}
}

// A free lock says what its record tells of the last holder in words; the
// queue entry's internal name is only in the cell's title.
func TestFreeLockInWords(t *testing.T) {
	f := newFakeSource()
	f.put("/coordrun/locks/idle", []byte("released lock-dd-0000000007"), 0)
	f.put("/coordrun/locks/crashed", []byte("held lock-ee-0000000009"), 0)
	f.put("/coordrun/locks/new", nil, 0)
	h := New(f, Options{Now: func() time.Time { return fixedNow }}).Handler()
	v := getJSON[LocksView](t, h, "/api/locks", 200)
	want := map[string]string{"idle": "released by its last holder", "crashed": "its last holder went without releasing it", "new": "never held"}
	for _, l := range v.Locks {
		if l.Free != want[l.Name] {
			t.Errorf("lock %s: free %q, want %q", l.Name, l.Free, want[l.Name])
		}
	}
	body := get(t, h, "/").Body.String()
	for _, w := range []string{`<td colspan="6" title="released lock-dd-0000000007">released by its last holder</td>`, `<td colspan="6">never held</td>`} {
		if !strings.Contains(body, w) {
			t.Errorf("page lacks %s", w)
		}
	}
	if strings.Contains(body, ">released lock-dd") {
		t.Error("the page shows the queue entry's internal name as the free row's text")
	}
}
