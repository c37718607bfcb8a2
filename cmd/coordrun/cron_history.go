package main

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/coordrun/coordrun/supervisor"
	"github.com/coordrun/coordrun/supervisor/state"
	"github.com/spf13/cobra"
)

// firingEntry is a firing's record as the cron commands show it: with its
// result, named as the status page and the metrics name it (failed for a
// run that exited non-zero, although its record's state says done).
type firingEntry struct {
	state.FiringRecord
	Result state.Result `json:"result"`
}

func firingEntryOf(r state.FiringRecord) firingEntry {
	return firingEntry{FiringRecord: r, Result: state.ResultOf(r)}
}

func newCronHistoryCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "history JOB",
		Short: "Show a job's firings: scheduled time, host, token, start, duration, exit code",
		Args:  cobra.ExactArgs(1),
		RunE: withClient(func(cmd *cobra.Command, args []string, s *clientSession) error {
			v, ctx := s.v, s.ctx
			recs, err := supervisor.CronHistory(ctx, s.store(), v.GetString("root"), args[0])
			if err != nil {
				return err
			}
			if n := v.GetInt("last"); n > 0 && len(recs) > n {
				recs = recs[len(recs)-n:]
			}
			if v.GetBool("json") {
				entries := make([]firingEntry, 0, len(recs))
				for _, r := range recs {
					entries = append(entries, firingEntryOf(r))
				}
				return writeJSON(cmd.OutOrStdout(), entries)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SCHEDULED\tRESULT\tATTEMPT\tHOST\tPID\tTOKEN\tSTART\tDURATION\tEXIT\tNOTE")
			for _, r := range recs {
				start, dur, exit := "", "", ""
				if !r.Start.IsZero() {
					start = r.Start.Local().Format(time.TimeOnly)
				}
				if !r.End.IsZero() && !r.Start.IsZero() {
					dur = r.End.Sub(r.Start).Round(time.Millisecond).String()
				}
				if r.ExitCode != nil {
					exit = fmt.Sprint(*r.ExitCode)
					if r.Signal != "" {
						exit += " (" + r.Signal + ")"
					}
				}
				note := r.Reason
				for _, l := range r.Earlier {
					what := "lost"
					if l.ExitCode != nil {
						what = fmt.Sprintf("exited %d", *l.ExitCode)
					}
					note += fmt.Sprintf("; attempt %d %s on %s (pid %d, token %d)", l.Attempt, what, l.Host, l.PID, l.Token)
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", r.Scheduled.Local().Format(time.DateTime), state.ResultOf(r),
					r.Attempts(), r.Host, r.PID, r.Token, start, dur, exit, strings.TrimPrefix(note, "; "))
				if v.GetBool("output") && r.OutputBytes > 0 {
					// The output breaks the table's columns: flush
					// before it, and indent it.
					if err := tw.Flush(); err != nil {
						return err
					}
					kept := ""
					if int64(len(r.Output)) < r.OutputBytes {
						kept = fmt.Sprintf(", the last %d kept", len(r.Output))
					}
					fmt.Fprintf(cmd.OutOrStdout(), "    output (%d bytes%s):\n", r.OutputBytes, kept)
					for _, line := range strings.Split(strings.TrimRight(r.Output, "\n"), "\n") {
						fmt.Fprintf(cmd.OutOrStdout(), "    | %s\n", line)
					}
				}
			}
			return tw.Flush()
		}),
	}
	addInspectFlags(cmd, state.DefaultCronRoot, "znode folder")
	cmd.Flags().Int("last", 20, "show only the newest N firings (0: all)")
	cmd.Flags().Bool("output", false, "print each firing's kept output after its line")
	return cmd
}
