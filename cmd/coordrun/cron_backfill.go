package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/coordrun/coordrun/supervisor"
	"github.com/coordrun/coordrun/supervisor/state"
	"github.com/spf13/cobra"
)

// backfillLimit bounds the firings one backfill may ask for.
const backfillLimit = 1000

func newCronBackfillCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "backfill JOB --from TIME --to TIME",
		Short: "Run each scheduled time of a range that has no record, once, oldest first (also while paused)",
		Args:  cobra.ExactArgs(1),
		RunE: withClient(func(cmd *cobra.Command, args []string, s *clientSession) error {
			from, err := time.Parse(time.RFC3339, s.v.GetString("from"))
			if err != nil {
				return usageError{fmt.Errorf("--from: want an RFC 3339 time (2026-12-01T03:00:00Z): %v", err)}
			}
			to, err := time.Parse(time.RFC3339, s.v.GetString("to"))
			if err != nil {
				return usageError{fmt.Errorf("--to: want an RFC 3339 time (2026-12-01T03:00:00Z): %v", err)}
			}
			if to.Before(from) {
				return usageError{errors.New("--to is before --from")}
			}
			if to.After(time.Now()) {
				return usageError{errors.New("--to is in the future: backfill runs firings whose time has passed")}
			}
			root, job := s.v.GetString("root"), args[0]
			times, err := supervisor.MissedFirings(s.ctx, s.store(), root, job, from, to, backfillLimit)
			if err != nil {
				return err
			}
			a := cronAction{Job: job, Action: "backfilled"}
			if len(times) == 0 {
				return printCronAction(cmd, s.v, a, fmt.Sprintf("%s: every scheduled time from %s to %s has a record; nothing to run", job, from.Format(time.RFC3339), to.Format(time.RFC3339)))
			}
			node, err := supervisor.RequestCron(s.ctx, s.store(), root, job, state.CronRequest{Kind: state.RequestBackfill, Times: times, By: requester()}, time.Now())
			if err != nil {
				return err
			}
			a.Changed, a.Request, a.Times = true, node, times
			return printCronAction(cmd, s.v, a, fmt.Sprintf("%s: %d missed firings from %s to %s requested, oldest first", job, len(times),
				times[0].Format(time.RFC3339), times[len(times)-1].Format(time.RFC3339)))
		}),
	}
	addInspectFlags(cmd, state.DefaultCronRoot, "znode folder")
	cmd.Flags().String("from", "", "first scheduled time (RFC 3339)")
	cmd.Flags().String("to", "", "last scheduled time (RFC 3339)")
	_ = cmd.MarkFlagRequired("from")
	_ = cmd.MarkFlagRequired("to")
	return cmd
}
