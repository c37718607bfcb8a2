package main

import (
	"fmt"
	"time"

	"github.com/coordrun/coordrun/supervisor"
	"github.com/coordrun/coordrun/supervisor/state"
	"github.com/spf13/cobra"
)

func newCronTriggerCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "trigger JOB",
		Short: "Run a job once now, on one of its hosts, as a firing of its own (also while paused)",
		Args:  cobra.ExactArgs(1),
		RunE: withClient(func(cmd *cobra.Command, args []string, s *clientSession) error {
			now := time.Now().UTC().Truncate(time.Second)
			node, err := supervisor.RequestCron(s.ctx, s.store(), s.v.GetString("root"), args[0],
				state.CronRequest{Kind: state.RequestTrigger, Times: []time.Time{now}, By: requester()}, time.Now())
			if err != nil {
				return err
			}
			return printCronAction(cmd, s.v, cronAction{Job: args[0], Action: "triggered", Changed: true, Request: node, Times: []time.Time{now}},
				fmt.Sprintf("%s triggered for %s (%s); see coordrun cron history %s", args[0], now.Local().Format(time.DateTime), node, args[0]))
		}),
	}
	addInspectFlags(cmd, state.DefaultCronRoot, "znode folder")
	return cmd
}
