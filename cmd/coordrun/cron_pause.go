package main

import (
	"fmt"

	"github.com/coordrun/coordrun/supervisor"
	"github.com/coordrun/coordrun/supervisor/state"
	"github.com/spf13/cobra"
)

func newCronPauseCommand(pause bool) *cobra.Command {
	use, short := "resume JOB", "Resume a paused job: its firings run again"
	if pause {
		use, short = "pause JOB", "Pause a job on every host: its firings are recorded paused, not run"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: withClient(func(cmd *cobra.Command, args []string, s *clientSession) error {
			root, job := s.v.GetString("root"), args[0]
			var changed bool
			var err error
			if pause {
				changed, err = supervisor.PauseCron(s.ctx, s.store(), root, job, requester())
			} else {
				changed, err = supervisor.ResumeCron(s.ctx, s.store(), root, job)
			}
			if err != nil {
				return err
			}
			switch {
			case pause && changed:
				fmt.Fprintf(cmd.OutOrStdout(), "%s paused\n", job)
			case pause:
				fmt.Fprintf(cmd.OutOrStdout(), "%s was already paused\n", job)
			case changed:
				fmt.Fprintf(cmd.OutOrStdout(), "%s resumed\n", job)
			default:
				fmt.Fprintf(cmd.OutOrStdout(), "%s was not paused\n", job)
			}
			return nil
		}),
	}
	addInspectFlags(cmd, state.DefaultCronRoot, "znode folder")
	return cmd
}
