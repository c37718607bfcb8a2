package statuspage_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/coordrun/coordrun/ensemble/statuspage"
	"github.com/coordrun/coordrun/internal/testkit"
)

// The browser test: the real binary's members, supervisors and cron job,
// and the page in headless Chromium.

// Timing of the supervisors the test runs: a short session timeout, so
// that a killed holder is replaced soon.
const (
	browserSessionTimeout = 3 * time.Second
	browserKillGrace      = 500 * time.Millisecond
	browserDriftMargin    = 100 * time.Millisecond
)

// chromiumPath finds the browser; "" when there is none.
func chromiumPath() string {
	if p := os.Getenv("COORDRUN_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// requireChromium skips the test without a browser, unless under CI,
// where a missing browser is a broken setup.
func requireChromium(t *testing.T) string {
	t.Helper()
	p := chromiumPath()
	if p == "" {
		if ci := os.Getenv("CI"); ci != "" && ci != "false" && ci != "0" {
			t.Fatal("CI is set but no chromium is installed (.ci/run installs Debian's chromium); set COORDRUN_CHROMIUM to its path")
		}
		t.Skip("no chromium found (Debian: apt-get install chromium; or set COORDRUN_CHROMIUM): the browser test is skipped")
	}
	return p
}

// webEnsemble is a process ensemble whose members serve the page.
type webEnsemble struct {
	t      *testing.T
	layout *testkit.ProcessEnsemble
	admin  []string
	procs  []*testkit.Process
}

func startWebEnsemble(t *testing.T, bin string, n int) *webEnsemble {
	t.Helper()
	layout, err := testkit.NewProcessEnsemble(bin, "127.0.0.1", t.TempDir(), n)
	if err != nil {
		t.Fatal(err)
	}
	layout.Args = append(testkit.RaftFlags(), "--min-session-timeout", "1s")
	e := &webEnsemble{t: t, layout: layout, admin: testkit.FreeAddrs(t, "127.0.0.1", n)}
	for i := range n {
		args := layout.ServerArgs(i, "--admin-addr", e.admin[i])
		cmd := exec.Command(bin, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		e.procs = append(e.procs, testkit.Spawn(t, fmt.Sprintf("member %d", i+1), cmd))
	}
	testkit.WaitFor(t, 30*time.Second, "a healthy ensemble", func() bool {
		v, err := fetch[statuspage.EnsembleView](e.url(0) + "/api/ensemble")
		return err == nil && v.Health == statuspage.HealthHealthy
	})
	return e
}

func (e *webEnsemble) url(i int) string { return "http://" + e.admin[i] }

// leader is the index of the member the given one names leader, or -1.
func (e *webEnsemble) leader(from int) int {
	v, err := fetch[statuspage.EnsembleView](e.url(from) + "/api/ensemble")
	if err != nil || v.Health != statuspage.HealthHealthy {
		return -1
	}
	for i := range e.procs {
		if fmt.Sprint(i+1) == v.Leader {
			return i
		}
	}
	return -1
}

var apiClient = &http.Client{Timeout: 5 * time.Second}

func fetch[T any](url string) (T, error) {
	var v T
	resp, err := apiClient.Get(url)
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return v, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return v, json.NewDecoder(resp.Body).Decode(&v)
}

// spawnClient starts a `coordrun run` or `coordrun cron` against the
// ensemble.
func spawnClient(t *testing.T, bin, name string, e *webEnsemble, args ...string) *testkit.Process {
	t.Helper()
	all := append([]string{args[0], "--servers", e.layout.Servers(), "--session-timeout", browserSessionTimeout.String(),
		"--kill-grace", browserKillGrace.String(), "--drift-margin", browserDriftMargin.String()}, args[1:]...)
	cmd := exec.Command(bin, all...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return testkit.Spawn(t, name, cmd)
}

// consoleErrors collects what the page reports as errors: console.error
// and console.assert calls, uncaught exceptions, and the browser's own
// error log (failed loads, CSP violations).
type consoleErrors struct {
	mu   sync.Mutex
	errs []string
}

func (c *consoleErrors) listen(ev any) {
	var msg string
	switch e := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		if e.Type != runtime.ConsoleAPICalledTypeError && e.Type != runtime.ConsoleAPICalledTypeAssert {
			return
		}
		var parts []string
		for _, a := range e.Args {
			if a.Description != "" {
				parts = append(parts, a.Description)
			} else {
				parts = append(parts, string(a.Value))
			}
		}
		msg = "console." + string(e.Type) + ": " + strings.Join(parts, " ")
	case *runtime.EventExceptionThrown:
		msg = "exception: " + e.ExceptionDetails.Text
		if e.ExceptionDetails.Exception != nil {
			msg += " " + e.ExceptionDetails.Exception.Description
		}
	case *log.EventEntryAdded:
		if e.Entry.Level != log.EntryLevelError {
			return
		}
		msg = "log " + string(e.Entry.Source) + ": " + e.Entry.Text + " " + e.Entry.URL
	default:
		return
	}
	c.mu.Lock()
	c.errs = append(c.errs, msg)
	c.mu.Unlock()
}

func (c *consoleErrors) check(t *testing.T, when string) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.errs {
		t.Errorf("%s: the page reported an error: %s", when, e)
	}
	c.errs = nil
}

// screenshotDir is where the test saves its screenshots:
// $COORDRUN_SCREENSHOTS, or the test's temporary directory.
func screenshotDir(t *testing.T) string {
	if d := os.Getenv("COORDRUN_SCREENSHOTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// truncatedCells lists the text of every member table cell wider than
// its box, as JSON.
const truncatedCells = `JSON.stringify([...document.querySelectorAll('#members th, #members td')].filter(c => c.scrollWidth > c.clientWidth).map(c => c.textContent))`

// TestBrowserStatusPage drives the page in headless Chromium: three
// members of the real binary, three supervisors on one lock and a cron
// job. The page shows the leader, the holder and the two waiters in
// order; after the holder's supervisor is killed it shows the next
// holder with a higher token within the session timeout plus 2s, without
// a reload; a cron firing appears with its host; after the leader is
// killed, the page of a surviving member shows the new leader and the
// dead member unreachable. The page reports no error throughout.
func TestBrowserStatusPage(t *testing.T) {
	chromium := requireChromium(t)
	bin, err := testkit.Binary(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	e := startWebEnsemble(t, bin, 3)
	t.Logf("ensemble up: %v", time.Since(start).Round(100*time.Millisecond))
	shots := screenshotDir(t)
	host, _ := os.Hostname()

	// The page is served by a follower, so that it survives the
	// leader's death.
	var leader int
	testkit.WaitFor(t, 10*time.Second, "a leader", func() bool { leader = e.leader(0); return leader >= 0 })
	page := (leader + 1) % 3

	// Three supervisors on one lock, joining in turn.
	var sups []*testkit.Process
	for i := range 3 {
		sups = append(sups, spawnClient(t, bin, fmt.Sprintf("supervisor %d", i+1), e, "run", "--name", "nightly", "--", "sleep", "600"))
		testkit.WaitFor(t, 20*time.Second, fmt.Sprintf("supervisor %d in the queue", i+1), func() bool {
			l, err := fetch[statuspage.LockView](e.url(page) + "/api/locks/nightly")
			return err == nil && l.Holder != nil && len(l.Waiting) == i
		})
	}
	spawnClient(t, bin, "cron", e, "cron", "--name", "tick", "--schedule", "@every 2s", "--", "sh", "-c", "echo tick from $(hostname); date -u; test $(( $(date +%s) / 2 % 3 )) -ne 0")

	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox,
			chromedp.Flag("disable-gpu", true), chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1280, 900))...)
	defer cancelAlloc()
	ctx, cancelTab := chromedp.NewContext(allocCtx)
	defer cancelTab()
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	var errs consoleErrors
	if err := chromedp.Listen(ctx, errs.listen); err != nil {
		t.Fatalf("chromium: %v", err)
	}
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	// waitFor polls a JavaScript condition on the page until d passes.
	waitFor := func(what string, d time.Duration, cond string) {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](cond, chromedp.WithPollingTimeout(d), chromedp.WithPollingInterval(100*time.Millisecond))); err != nil {
			t.Fatalf("waiting %v for the page to show %s: %v", d, what, err)
		}
	}
	eval := func(expr string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
		if err != nil {
			t.Fatalf("evaluate %s: %v", expr, err)
		}
		return v
	}
	shoot := func(name, section string) {
		t.Helper()
		// Blurred first: the keyboard check leaves the skip link focused,
		// and shown, over the title.
		do("scroll to "+section, chromedp.Evaluate[chromedp.Void](`document.activeElement && document.activeElement.blur(); document.querySelector(`+jsString(section)+`).scrollIntoView(); void 0`))
		b, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(shots, name+".png"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// No cell of the member table may cut its text: the leader's own
	// page carries two badges in one cell, a dead member a long error.
	fits := func(when string) {
		t.Helper()
		if cut := eval(truncatedCells); cut != "[]" {
			t.Errorf("%s: member table cells cut short: %s", when, cut)
		}
	}
	// The leader may move on a loaded machine: its page is the one whose
	// own row also carries the leader's badge.
	const ownRowLeads = `document.querySelectorAll('#members tr.leader .badge').length === 2`
	do("set the viewport", chromedp.EmulateViewport(1280, 900))
	testkit.WaitFor(t, 30*time.Second, "the leader's page showing it leads", func() bool {
		if leader = e.leader(0); leader < 0 {
			return false
		}
		do("open the leader's page", chromedp.Navigate(e.url(leader)+"/"))
		_, err := chromedp.Run(ctx, chromedp.Poll[bool](ownRowLeads, chromedp.WithPollingTimeout(5*time.Second), chromedp.WithPollingInterval(100*time.Millisecond)))
		return err == nil
	})
	fits("the leader's page")
	if leader == page {
		page = (leader + 1) % 3
	}
	do("open the page", chromedp.Navigate(e.url(page)+"/"))
	// A marker the page loses if it reloads.
	do("mark the page", chromedp.Evaluate[chromedp.Void](`window.notReloaded = true`))
	do("press Tab", chromedp.KeyEvent("\t"))
	if got := eval(`document.activeElement.className + ":" + document.activeElement.getAttribute("href")`); got != "skip:#main" {
		t.Errorf("the first Tab focuses %q, want the skip link to #main", got)
	}
	waitFor("the stream live", 10*time.Second, `document.querySelector("#live.on") !== null`)
	waitFor("the leader", 10*time.Second, fmt.Sprintf(`(() => { const r = document.querySelector('#members tr.leader'); return r !== null && r.dataset.id === %q && r.querySelector('.badge.lead') !== null })()`, fmt.Sprint(leader+1)))
	pids := make([]string, 3)
	for i, s := range sups {
		pids[i] = fmt.Sprint(s.Pid())
	}
	lockRow := func(sel string) string {
		return `document.querySelector('#lock-list [data-lock="nightly"] ` + sel + `')`
	}
	waitFor("the holder and two waiters in order", 10*time.Second, fmt.Sprintf(
		`(() => { const h = %s, w1 = %s, w2 = %s; return h && w1 && w2 && h.dataset.pid === %q && w1.dataset.pid === %q && w2.dataset.pid === %q })()`,
		lockRow("tr.holder"), lockRow(`tr.waiter[data-pos="1"]`), lockRow(`tr.waiter[data-pos="2"]`), pids[0], pids[1], pids[2]))
	if got := eval(lockRow("tr.holder") + `.dataset.host`); got != host {
		t.Errorf("holder's host %q, want %q", got, host)
	}
	firstToken := eval(lockRow("tr.holder") + `.dataset.token`)
	waitFor("the charts drawn", 10*time.Second, `document.querySelector('.chart[data-metric="sessions"] polyline').getAttribute('points') !== ''`)
	shoot("ensemble", "#ensemble")
	errs.check(t, "first view")
	t.Logf("%s: %v", "first view", time.Since(start).Round(100*time.Millisecond))

	// The holder's supervisor dies: its session ends a session timeout
	// later, and the first waiter takes the lock.
	killed := time.Now()
	if err := sups[0].Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	within := browserSessionTimeout + 2*time.Second
	waitFor("the next holder with a higher token", within, fmt.Sprintf(
		`(() => { const h = %s; return h !== null && h.dataset.pid === %q && BigInt(h.dataset.token) > BigInt(%q) && %s === null })()`,
		lockRow("tr.holder"), pids[1], firstToken, lockRow(`tr.waiter[data-pos="2"]`)))
	t.Logf("new holder shown %v after the kill (session timeout %v)", time.Since(killed).Round(10*time.Millisecond), browserSessionTimeout)
	if eval(`String(window.notReloaded === true)`) != "true" {
		t.Error("the page reloaded to show the new holder")
	}
	// By keyboard: the link takes focus and Enter opens the history.
	do("open the lock's history", chromedp.Focus(chromedp.CSS(`#lock-list a[data-lock-link="nightly"]`)), chromedp.KeyEvent("\r"))
	waitFor("the lock's history with the first holder's token", 5*time.Second, fmt.Sprintf(
		`Array.from(document.querySelectorAll('#lock-detail tr[data-token]')).some(r => r.dataset.token === %q)`, firstToken))
	shoot("locks", "#locks")
	errs.check(t, "holder killed")
	t.Logf("%s: %v", "holder killed", time.Since(start).Round(100*time.Millisecond))

	// A cron firing on the timeline, with its host.
	waitFor("a cron firing with its host", 20*time.Second, fmt.Sprintf(
		`document.querySelector('#job-list [data-job="tick"] li.f[data-result="done"][data-host=%q]') !== null`, host))
	do("open the last firing", chromedp.Evaluate[chromedp.Void](`(() => { const fs = document.querySelectorAll('#job-list [data-job="tick"] li.f[data-result="done"] details'); fs[fs.length-1].open = true })()`))
	shoot("cron", "#cron")
	errs.check(t, "cron")
	t.Logf("%s: %v", "cron", time.Since(start).Round(100*time.Millisecond))

	// The tree browser, by keyboard-reachable links.
	for _, p := range []string{"/coordrun", "/coordrun/locks", "/coordrun/locks/nightly"} {
		do("open "+p, chromedp.Click(chromedp.CSS(`#node a[data-tree="`+p+`"]`)))
		waitFor(p+" in the tree", 5*time.Second, `document.querySelector('#node').dataset.path === `+jsString(p))
	}
	kid := eval(`Array.from(document.querySelectorAll('#node .kids a[data-tree]')).map(a => a.dataset.tree).find(p => p.includes('/lock-'))`)
	do("open "+kid, chromedp.Click(chromedp.CSS(`#node a[data-tree="`+kid+`"]`)))
	waitFor("a queue node's data", 5*time.Second, `document.querySelector('#node').dataset.path === `+jsString(kid)+` && document.querySelector('#node .data pre') !== null`)
	shoot("tree", "#tree")
	errs.check(t, "tree")
	t.Logf("%s: %v", "tree", time.Since(start).Round(100*time.Millisecond))

	// The leader dies; the page's own member survives.
	testkit.WaitFor(t, 10*time.Second, "a leader before the kill", func() bool { leader = e.leader(page); return leader >= 0 })
	if leader == page {
		page = (leader + 1) % 3
		do("open a surviving member's page", chromedp.Navigate(e.url(page)+"/"))
	}
	e.procs[leader].Kill()
	dead := fmt.Sprint(leader + 1)
	waitFor("a new leader and the dead member unreachable", 30*time.Second, fmt.Sprintf(
		`(() => { const l = document.querySelector('#members tr.leader'), d = document.querySelector('#members tr[data-id=%q]');
		  return l !== null && l.dataset.id !== %q && d !== null && d.dataset.reachable === "false" && d.querySelector('.err') !== null })()`, dead, dead))
	fits("a member dead")
	if h := eval(`document.querySelector('#health .word').textContent`); h != statuspage.HealthDegraded {
		t.Errorf("health %q with one of three members dead, want %s", h, statuspage.HealthDegraded)
	}
	errs.check(t, "leader killed")
	t.Logf("%s: %v", "leader killed", time.Since(start).Round(100*time.Millisecond))

	// Dark mode follows the system's.
	// The background's red, green and blue added up: over 600 light,
	// under 150 dark.
	const brightness = `String(getComputedStyle(document.body).backgroundColor.match(/\d+/g).slice(0, 3).reduce((a, b) => a + Number(b), 0))`
	light := eval(brightness)
	do("prefer dark", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}}})
		return err
	}))
	dark := eval(brightness)
	if l, d := atoi(light), atoi(dark); l < 600 || d > 150 {
		t.Errorf("background's brightness %s in light mode, %s in dark; want over 600 and under 150", light, dark)
	}
	// Without JavaScript the page is the server's: the same sections,
	// no stream.
	do("turn scripts off", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true})
		return err
	}), chromedp.Navigate(e.url(page)+"/?lock=nightly"))
	if got := eval(`[document.querySelector('#live').textContent.startsWith('as of'), document.querySelector('#members tr.leader') !== null,
		document.querySelector('#lock-list [data-lock="nightly"] tr.holder') !== null, document.querySelector('#lock-detail tr[data-token]') !== null,
		document.querySelector('#job-list li.f') !== null].join()`); got != "true,true,true,true,true" {
		t.Errorf("the page without scripts (static, leader, holder, history, firings): %s", got)
	}
	errs.check(t, "without scripts")
	t.Logf("browser test took %v; screenshots in %s", time.Since(start).Round(100*time.Millisecond), shots)
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
