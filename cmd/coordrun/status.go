package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/supervisor"
	"github.com/coordrun/coordrun/supervisor/state"
	"github.com/spf13/cobra"
)

func newStatusCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status [lock...]",
		Short: "Show each lock's holder (host, pid, token, since) and its queue",
		RunE: withClient(func(cmd *cobra.Command, args []string, s *clientSession) error {
			v, ctx := s.v, s.ctx
			if err := checkLocksExist(ctx, s.store(), v.GetString("root"), args); err != nil {
				return err
			}
			locks, err := supervisor.Inspect(ctx, s.store(), v.GetString("root"), args)
			if err != nil {
				return err
			}
			if v.GetBool("json") {
				if locks == nil {
					locks = []supervisor.LockState{}
				}
				if err := writeJSON(cmd.OutOrStdout(), locks); err != nil {
					return err
				}
			} else {
				printLocks(cmd.OutOrStdout(), locks)
			}
			return unreadableLocks(locks)
		}),
	}
	addInspectFlags(cmd, state.DefaultLockRoot, "znode folder holding every lock")
	return cmd
}

func printLocks(w io.Writer, locks []supervisor.LockState) {
	if len(locks) == 0 {
		fmt.Fprintln(w, "no locks")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LOCK\tROLE\tHOST\tPID\tTOKEN\tSINCE\tCOMMAND")
	var warnings, open []string
	for _, l := range locks {
		if s := l.Stopping; s != nil {
			row(tw, l.Name, "stopping", state.Contender{Node: s.Node, Token: s.Token, Info: s.HolderInfo})
		}
		switch {
		case l.Unreadable:
			fmt.Fprintf(tw, "%s\tunreadable\t\t\t\t\t\n", l.Name)
		case l.Holder == nil && l.Stopping == nil:
			fmt.Fprintf(tw, "%s\tfree\t\t\t\t\t\n", l.Name)
		case len(l.Holders) > 0:
			for i, h := range l.Holders {
				row(tw, l.Name, fmt.Sprintf("holder %d/%d", i+1, l.MaxHolders), h)
			}
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
			open = append(open, l.Name)
		}
		for _, h := range append(holders(l), l.Holder) {
			if h != nil && h.Lingering != "" {
				warnings = append(warnings, fmt.Sprintf("warning: lock %s: %s (holder %s pid %d)", l.Name, h.Lingering, h.Info.Host, h.Info.PID))
				break
			}
		}
		if l.Stopping != nil {
			warnings = append(warnings, fmt.Sprintf("warning: lock %s: the previous holder's node %s was deleted by another client; it is stopping its job", l.Name, l.Stopping.Node))
		}
	}
	tw.Flush()
	if len(open) > 0 { // one notice, however many locks
		warnings = append([]string{fmt.Sprintf("warning: any client can delete the nodes of %s: their ACL is open (status --json shows it); run with --auth or a client certificate", strings.Join(open, ", "))}, warnings...)
	}
	for _, s := range warnings {
		fmt.Fprintln(w, s)
	}
}

func row(w io.Writer, lock, role string, c state.Contender) {
	if c.Lingering != "" {
		role += " (lingering)"
	}
	since := ""
	if !c.Info.Since.IsZero() {
		since = c.Info.Since.Local().Format(time.DateTime)
	}
	fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%s\t%s\n", lock, role, c.Info.Host, c.Info.PID, c.Token, since, c.Info.Command)
}

// unreadableLocks is the error of a status that could not read every
// lock: no permission, which withClient explains (exit 64).
func unreadableLocks(locks []supervisor.LockState) error {
	var names []string
	for _, l := range locks {
		if l.Unreadable {
			names = append(names, l.Name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	return fmt.Errorf("cannot read lock %s: %w", strings.Join(names, ", "), wire.ErrNoAuth)
}

// holders are a semaphore's holders, each once.
func holders(l supervisor.LockState) []*state.Contender {
	var out []*state.Contender
	for i := range l.Holders {
		out = append(out, &l.Holders[i])
	}
	return out
}
