package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/coordrun/coordrun/supervisor"
	"github.com/coordrun/coordrun/supervisor/state"
	"github.com/spf13/cobra"
)

// cronListEntry is one row of `coordrun cron list`.
type cronListEntry struct {
	state.CronJobInfo
	Next   *time.Time         `json:"next,omitempty"`
	Last   *firingEntry       `json:"last,omitempty"`
	Hosts  []state.HolderInfo `json:"hosts"`
	Paused *state.CronControl `json:"paused,omitempty"`
}

func newCronListCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List cron jobs: schedule, last run, next firing, hosts taking part",
		Args:  cobra.NoArgs,
		RunE: withClient(func(cmd *cobra.Command, _ []string, s *clientSession) error {
			v, c, ctx := s.v, s.store(), s.ctx
			jobs, hosts, err := supervisor.CronJobs(ctx, c, v.GetString("root"))
			if err != nil {
				return err
			}
			entries := []cronListEntry{}
			for _, j := range jobs {
				e := cronListEntry{CronJobInfo: j, Hosts: hosts[j.Name]}
				if s, err := state.ParseSchedule(j.Schedule, j.TZ); err == nil {
					n := s.Next(time.Now())
					e.Next = &n
				}
				if recs, err := supervisor.CronHistory(ctx, c, v.GetString("root"), j.Name); err == nil && len(recs) > 0 {
					last := firingEntryOf(recs[len(recs)-1])
					e.Last = &last
				}
				if e.Hosts == nil {
					e.Hosts = []state.HolderInfo{}
				}
				e.Paused, _ = supervisor.CronPaused(ctx, c, v.GetString("root"), j.Name)
				entries = append(entries, e)
			}
			if v.GetBool("json") {
				return writeJSON(cmd.OutOrStdout(), entries)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "JOB\tSCHEDULE\tNEXT\tLAST\tRESULT\tHOST\tEXIT\tHOSTS")
			for _, e := range entries {
				next, last, result, host, exit := "", "", "", "", ""
				if e.Next != nil {
					next = e.Next.Local().Format(time.DateTime)
				}
				if e.Paused != nil {
					next = "paused by " + e.Paused.By
				}
				if e.Last != nil {
					last, result, host = e.Last.Scheduled.Local().Format(time.DateTime), string(e.Last.Result), e.Last.Host
					if e.Last.ExitCode != nil {
						exit = fmt.Sprint(*e.Last.ExitCode)
					}
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", e.Name, e.Schedule, next, last, result, host, exit, len(e.Hosts))
			}
			return tw.Flush()
		}),
	}
	addInspectFlags(cmd, state.DefaultCronRoot, "znode folder")
	return cmd
}
