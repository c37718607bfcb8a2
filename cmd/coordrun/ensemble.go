package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/coordrun/coordrun/ensemble"
	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/supervisor"
	"github.com/spf13/cobra"
)

func newEnsembleCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ensemble",
		Short: "Inspect and manage the ensemble",
	}
	cmd.AddCommand(newEnsembleStatusCommand(), newEnsembleAddCommand(), newEnsembleRemoveCommand(), newEnsembleSnapshotCommand(), newEnsembleSuperDigestCommand(), newEnsembleSecretCommand())
	return cmd
}

func newEnsembleStatusCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the members, the leader, and each member's term, commit and applied index",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			servers, tlsCfg, err := serverFlags(v)
			if err != nil {
				return err
			}
			timeout := v.GetDuration("timeout")
			wait := v.GetDuration("wait")
			deadline := time.Now().Add(wait)
			st, err := ensembleStatus(servers, timeout, tlsCfg)
			for wait > 0 && !healthy(st, err) && time.Now().Before(deadline) {
				select {
				case <-cmd.Context().Done():
					return cmd.Context().Err()
				case <-time.After(100 * time.Millisecond):
				}
				st, err = ensembleStatus(servers, timeout, tlsCfg)
			}
			if err != nil {
				// Bad flags were refused above: what is left is members
				// not answering, which trying again later can mend.
				return exitError{code: supervisor.ExitUnavailable, err: err}
			}
			if v.GetBool("json") {
				if err := writeJSON(cmd.OutOrStdout(), st); err != nil {
					return err
				}
			} else {
				printStatus(cmd.OutOrStdout(), st)
			}
			if wait > 0 && !healthy(st, nil) {
				return fmt.Errorf("ensemble not healthy after %v", wait)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.String("servers", "127.0.0.1:2181", "client addresses of members to ask, host:port,...")
	f.Bool("json", false, "print JSON")
	f.Duration("timeout", 5*time.Second, "how long to wait for a member")
	f.Duration("wait", 0, "wait up to this long for a healthy ensemble (every member up, one leader, all applied alike); exit 1 if it is not")
	addClientTLSFlags(f)
	return cmd
}

// ensembleStatus asks the listed members in turn and prefers an answer
// from one that knows the leader: a member just restarted may not yet.
func ensembleStatus(servers []string, timeout time.Duration, tc *tls.Config) (ensemble.Status, error) {
	var first *ensemble.Status
	var lastErr error
	for _, s := range servers {
		st, err := fetchStatus(s, timeout, tc)
		if err != nil {
			lastErr = err
			continue
		}
		if st.Leader != "" {
			return st, nil
		}
		if first == nil {
			first = &st
		}
	}
	if first != nil {
		return *first, nil
	}
	return ensemble.Status{}, fmt.Errorf("no member answered: %w", lastErr)
}

func healthy(st ensemble.Status, err error) bool {
	if err != nil || st.Leader == "" || len(st.Members) == 0 {
		return false
	}
	for _, m := range st.Members {
		if m.Error != "" || m.Leader != st.Leader || m.AppliedIndex != st.Members[0].AppliedIndex {
			return false
		}
	}
	return true
}

func fetchStatus(addr string, timeout time.Duration, tc *tls.Config) (ensemble.Status, error) {
	var st ensemble.Status
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	b, err := client.FourLetter(ctx, addr, "mbrs", tc)
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal([]byte(b), &st); err != nil {
		return st, fmt.Errorf("%s: not a coordrun member (%v)", addr, err)
	}
	return st, nil
}

func printStatus(w io.Writer, st ensemble.Status) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tTERM\tCOMMIT\tAPPLIED\tZXID\tCLIENT\tPEER\tERROR")
	for _, m := range st.Members {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t0x%x\t%s\t%s\t%s\n", m.ID, m.State, m.Term, m.CommitIndex, m.AppliedIndex, m.LastZxid, m.ClientAddr, m.PeerAddr, m.Error)
	}
	tw.Flush()
	for _, m := range st.Members {
		for _, a := range m.Alarms {
			fmt.Fprintf(w, "alarm: member %s: %s\n", m.ID, a)
		}
	}
	if st.Leader == "" {
		fmt.Fprintln(w, "leader: none")
	} else {
		fmt.Fprintf(w, "leader: %s\n", st.Leader)
	}
}
