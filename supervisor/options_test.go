package supervisor

import (
	"github.com/coordrun/coordrun/supervisor/state"

	"strings"
	"testing"
	"time"
)

func TestOptionsValidate(t *testing.T) {
	ok := func() Options {
		return Options{
			ConnOptions: ConnOptions{Servers: []string{"127.0.0.1:2181"}, SessionTimeout: 10 * time.Second, DriftMargin: 250 * time.Millisecond},
			JobOptions:  JobOptions{KillGrace: 2 * time.Second},
			LockOptions: LockOptions{Root: "/coordrun/locks", Name: "nightly"},
			Argv:        []string{"true"},
		}
	}
	for _, c := range []struct {
		name   string
		change func(*Options)
		err    string // "" for valid
	}{
		{"defaults", func(*Options) {}, ""},
		{"root /", func(o *Options) { o.Root = "/" }, ""},
		{"no command", func(o *Options) { o.Argv = nil }, "no command given"},
		{"empty name", func(o *Options) { o.Name = "" }, `bad lock name ""`},
		{"name with slash", func(o *Options) { o.Name = "a/b" }, `bad lock name "a/b"`},
		{"name dot", func(o *Options) { o.Name = "." }, `bad lock name "."`},
		{"name NUL", func(o *Options) { o.Name = "a\x00" }, "bad lock name"},
		{"name of 255 bytes", func(o *Options) { o.Name = strings.Repeat("é", 127) + "x" }, ""},
		{"name of 256 bytes", func(o *Options) { o.Name = strings.Repeat("n", 256) }, "it is 256 bytes long; a name is 1 to 255 bytes"},
		// Such a name once logged "job finished exit=0" for a job that
		// never ran: the watchdog's control line outgrew its reader.
		{"name of 66,000 bytes", func(o *Options) { o.Name = strings.Repeat("n", 66000) }, "it is 66000 bytes long"},
		{"name with a tab", func(o *Options) { o.Name = "a\tb" }, `character U+0009 at byte 1 is not allowed`},
		{"name with an emoji", func(o *Options) { o.Name = "job-\U0001F600" }, `character U+1F600 at byte 4 is not allowed`},
		{"name of bad UTF-8", func(o *Options) { o.Name = "a\xff" }, `character U+FFFD at byte 1`},
		{"name in another script", func(o *Options) { o.Name = "夜间备份" }, ""},
		{"root of 1,025 bytes", func(o *Options) { o.Root = "/" + strings.Repeat("r", 1024) }, "lock root is 1025 bytes long; at most 1024"},
		{"root with a tab", func(o *Options) { o.Root = "/co\trd" }, "bad lock root's name"},
		{"root with an empty part", func(o *Options) { o.Root = "/a//b" }, "bad lock root's name \"\": it is empty"},
		{"relative root", func(o *Options) { o.Root = "coordrun" }, `lock root "coordrun" must be an absolute znode path`},
		{"root trailing slash", func(o *Options) { o.Root = "/coordrun/" }, "absolute znode path"},
		{"no session timeout", func(o *Options) { o.SessionTimeout = 0 }, "session timeout must be positive"},
		{"negative grace", func(o *Options) { o.KillGrace = -1 }, "must not be negative"},
		{"negative drift", func(o *Options) { o.DriftMargin = -1 }, "must not be negative"},
		{"negative lock delay", func(o *Options) { o.LockDelay = -1 }, "must not be negative"},
		{"negative timeout", func(o *Options) { o.Timeout = -1 }, "must not be negative"},
		// Grace, margin and the kill's slack must stay under half the
		// session timeout: 2s + 250ms + 100ms < 5s.
		{"grace at the budget", func(o *Options) { o.KillGrace = 5*time.Second - 350*time.Millisecond }, ""},
		{"grace over the budget", func(o *Options) { o.KillGrace = 5*time.Second - 349*time.Millisecond }, "must stay under half the session timeout (5s)"},
		{"short session", func(o *Options) { o.SessionTimeout = 4 * time.Second }, "--kill-grace 2s + drift margin 250ms"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := ok()
			c.change(&o)
			checkValidate(t, o.Validate(), c.err)
		})
	}
}

func TestCronOptionsValidate(t *testing.T) {
	job := func(name string) *CronJob { return &CronJob{Name: name, Spec: "@every 1s", Argv: []string{"true"}} }
	ok := func() CronOptions {
		return CronOptions{
			ConnOptions: ConnOptions{SessionTimeout: 10 * time.Second},
			JobOptions:  JobOptions{KillGrace: 2 * time.Second},
			Root:        "/coordrun/cron",
			Jobs:        []*CronJob{job("a"), job("b")},
		}
	}
	for _, c := range []struct {
		name   string
		change func(*CronOptions)
		err    string
	}{
		{"defaults", func(*CronOptions) {}, ""},
		{"no jobs", func(o *CronOptions) { o.Jobs = nil }, "no jobs"},
		{"a bad job", func(o *CronOptions) { o.Jobs[1].Spec = "@every 0s" }, "job b: schedule"},
		{"a job twice", func(o *CronOptions) { o.Jobs = append(o.Jobs, job("a")) }, "job a defined twice"},
		{"relative root", func(o *CronOptions) { o.Root = "cron" }, `cron root "cron" must be an absolute znode path`},
		{"timing", func(o *CronOptions) { o.KillGrace = 5 * time.Second }, "must stay under half the session timeout"},
		{"no session timeout", func(o *CronOptions) { o.SessionTimeout = 0 }, "session timeout must be positive"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := ok()
			c.change(&o)
			checkValidate(t, o.Validate(), c.err)
		})
	}
	// Validate fills in each job's defaults.
	o := ok()
	if err := o.Validate(); err != nil || o.Jobs[0].Overlap != state.OverlapSkip || o.Jobs[0].History != 100 {
		t.Errorf("after Validate (%v): job %+v", err, o.Jobs[0])
	}
}

// checkValidate checks Validate's answer: no error when want is empty,
// else an error that says want.
func checkValidate(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("Validate: %v", err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Errorf("Validate = %v, want an error with %q", err, want)
	}
}
