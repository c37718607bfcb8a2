package supervisor

import (
	"context"
	"time"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/supervisor/engine/zkengine"
	"github.com/coordrun/coordrun/supervisor/state"
)

// PruneFirings lets the external tests prune a job's records as a host
// does after each firing, against a real ensemble.
func PruneFirings(ctx context.Context, c *client.Client, root, job string, total, success, failed int, oldest time.Time, counted int) int {
	return pruneFirings(ctx, zkengine.New(c, zkengine.Options{}), state.CronPaths{Root: root, Job: job},
		state.HistoryLimits{Total: total, Success: success, Failed: failed}, oldest, counted)
}

// RecordedCommand lets the external tests check the pure rule of what
// records keep of a command line.
var RecordedCommand = recordedCommand
