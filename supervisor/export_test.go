package supervisor

import (
	"context"
	"time"

	"github.com/coordrun/coordrun/supervisor/engine"
	"github.com/coordrun/coordrun/supervisor/state"
)

// PruneFirings lets the external tests prune a job's records as a host
// does after each firing, against a real store through its engine.
func PruneFirings(ctx context.Context, c engine.Store, root, job string, total, success, failed int, oldest time.Time, counted int) int {
	return pruneFirings(ctx, c, state.CronPaths{Root: root, Job: job},
		state.HistoryLimits{Total: total, Success: success, Failed: failed}, oldest, counted)
}

// RecordedCommand lets the external tests check the pure rule of what
// records keep of a command line.
var RecordedCommand = recordedCommand
