package main

import (
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
			a := cronAction{Job: job, Action: "resumed", Changed: changed}
			sentence := job + " resumed"
			switch {
			case pause && changed:
				a.Action, sentence = "paused", job+" paused"
			case pause:
				a.Action, sentence = "paused", job+" was already paused"
			case !changed:
				sentence = job + " was not paused"
			}
			return printCronAction(cmd, s.v, a, sentence)
		}),
	}
	addInspectFlags(cmd, state.DefaultCronRoot, "znode folder")
	return cmd
}
