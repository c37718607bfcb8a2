package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/coordrun/coordrun/supervisor"
	"github.com/spf13/cobra"
)

func newStatusCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status [lock...]",
		Short: "Show each lock's holder (host, pid, token, since) and its queue",
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := connectCommand(cmd)
			if err != nil {
				return err
			}
			defer s.close()
			v, c, ctx := s.v, s.c, s.ctx
			locks, err := supervisor.Inspect(ctx, c, v.GetString("root"), args)
			if err != nil {
				return err
			}
			if v.GetBool("json") {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				if locks == nil {
					locks = []supervisor.LockState{}
				}
				return enc.Encode(locks)
			}
			printLocks(cmd.OutOrStdout(), locks)
			return nil
		},
	}
	f := cmd.Flags()
	f.String("servers", "127.0.0.1:2181", "ensemble members, host:port,...")
	f.String("root", "/coordrun/locks", "znode folder holding every lock")
	f.Bool("json", false, "print JSON")
	f.Duration("timeout", 10*time.Second, "give up after this long")
	addClientTLSFlags(f)
	return cmd
}

func printLocks(w io.Writer, locks []supervisor.LockState) {
	if len(locks) == 0 {
		fmt.Fprintln(w, "no locks")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LOCK\tROLE\tHOST\tPID\tTOKEN\tSINCE\tCOMMAND")
	var warnings []string
	for _, l := range locks {
		if s := l.Stopping; s != nil {
			row(tw, l.Name, "stopping", supervisor.Contender{Node: s.Node, Token: s.Token, Info: s.HolderInfo})
		}
		switch {
		case l.Holder == nil && l.Stopping == nil:
			fmt.Fprintf(tw, "%s\tfree\t\t\t\t\t\n", l.Name)
		case l.Holder != nil && l.Holder.Holding:
			row(tw, l.Name, "holder", *l.Holder)
		case l.Holder != nil:
			// Lowest in the queue but not holding: taking the lock, or
			// waiting for a stopping previous holder.
			h := *l.Holder
			h.Info.Since = time.Time{}
			row(tw, l.Name, "next", h)
		}
		for i, c := range l.Waiters {
			row(tw, l.Name, fmt.Sprintf("waiter %d", i+1), c)
		}
		if l.Open {
			warnings = append(warnings, fmt.Sprintf("warning: lock %s is open to every client (ACL %s): anyone can delete its nodes; run with --auth or a client certificate", l.Name, l.ACL))
		}
		if l.Stopping != nil {
			warnings = append(warnings, fmt.Sprintf("warning: lock %s: the previous holder's node %s was deleted by another client; it is stopping its job", l.Name, l.Stopping.Node))
		}
	}
	tw.Flush()
	for _, s := range warnings {
		fmt.Fprintln(w, s)
	}
}

func row(w io.Writer, lock, role string, c supervisor.Contender) {
	since := ""
	if !c.Info.Since.IsZero() {
		since = c.Info.Since.Local().Format(time.DateTime)
	}
	fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%s\t%s\n", lock, role, c.Info.Host, c.Info.PID, c.Token, since, c.Info.Command)
}
