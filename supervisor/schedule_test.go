package supervisor

import (
	"strings"
	"testing"
	"time"

	"github.com/coordrun/coordrun/supervisor/state"
)

func TestCronJobValidate(t *testing.T) {
	ok := func() CronJob { return CronJob{Name: "nightly", Spec: "0 3 * * *", Argv: []string{"true"}} }
	j := ok()
	if err := j.Validate(); err != nil {
		t.Fatal(err)
	}
	if j.Overlap != state.OverlapSkip || j.History != 100 || j.schedule.Schedule == nil {
		t.Errorf("defaults: overlap %q history %d schedule %v", j.Overlap, j.History, j.schedule)
	}
	for _, c := range []struct {
		change func(*CronJob)
		err    string
	}{
		{func(j *CronJob) { j.Name = "" }, `bad job name ""`},
		{func(j *CronJob) { j.Name = "a/b" }, `bad job name "a/b"`},
		{func(j *CronJob) { j.Name = ".." }, `bad job name ".."`},
		{func(j *CronJob) { j.Argv = nil }, "job nightly: no command"},
		{func(j *CronJob) { j.Spec = "61 * * * *" }, `job nightly: schedule "61 * * * *"`},
		{func(j *CronJob) { j.Overlap = "sometimes" }, `overlap "sometimes": want skip, queue or replace`},
		{func(j *CronJob) { j.CatchUp = -time.Second }, "negative catch-up"},
		{func(j *CronJob) { j.History = -1 }, "at least 1 firing"},
		{func(j *CronJob) { j.Overlap = state.OverlapQueue; j.History = 1; j.CatchUp = time.Hour }, ""},
	} {
		j := ok()
		c.change(&j)
		err := j.Validate()
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%+v: %v", j, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%+v: %v, want an error with %q", j, err, c.err)
		}
	}
}
