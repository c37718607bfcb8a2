package supervisor

import (
	"context"
	"time"

	"github.com/coordrun/coordrun/ensemble/client"
)

// PruneFirings lets the external tests prune a job's records as a host
// does after each firing, against a real ensemble.
func PruneFirings(ctx context.Context, c *client.Client, root, job string, total, success, failed int, oldest time.Time, counted int) int {
	return pruneFirings(ctx, c, cronPaths{root: root, job: job}, historyLimits{total: total, success: success, failed: failed}, oldest, counted)
}

// RecordACL and RecordedCommand let the external tests check the pure
// rules of what records look like.
var (
	RecordACL       = recordACL
	RecordedCommand = recordedCommand
)
