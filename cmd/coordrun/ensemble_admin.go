package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/coordrun/coordrun/ensemble"
	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/spf13/cobra"
)

// Membership changes and backups. Members accept both only from their own
// host (loopback) or from networks listed in their --admin-from.

func newEnsembleAddCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "add ID PEER-ADDR",
		Short: "Add a member to the ensemble (start it first with --join)",
		Long: `Add a member to the running ensemble through raft. Start the new member
first with "coordrun server --join --id ID --peer-addr PEER-ADDR ..." and an
empty data dir; once added it catches up from the leader (by snapshot when
the log has been compacted).`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, _, err := net.SplitHostPort(args[1]); err != nil {
				return usageError{fmt.Errorf("peer address %q: %w", args[1], err)}
			}
			return withClient(reconfig("server."+args[0]+"="+args[1], ""))(cmd, args)
		},
	}
	addAdminFlags(cmd)
	return cmd
}

func newEnsembleRemoveCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "remove ID",
		Short: "Remove a member from the ensemble",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(reconfig("", args[0]))(cmd, args)
		},
	}
	addAdminFlags(cmd)
	return cmd
}

func addAdminFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.String("servers", "127.0.0.1:2181", "client addresses of members, host:port,...")
	f.Duration("timeout", 30*time.Second, "give up after this long")
	addClientTLSFlags(f)
}

// reconfig asks for a membership change: joining "server.<id>=<peer
// address>", leaving an id.
func reconfig(joining, leaving string) func(*cobra.Command, []string, *clientSession) error {
	return func(cmd *cobra.Command, _ []string, s *clientSession) error {
		cfg, err := s.c.Reconfig(s.ctx, joining, leaving)
		if err != nil {
			return fmt.Errorf("membership change refused: %w", err)
		}
		fmt.Fprint(cmd.OutOrStdout(), string(cfg))
		return nil
	}
}

func newEnsembleSnapshotCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Back up the ensemble's data",
	}
	save := &cobra.Command{
		Use:   "save FILE",
		Short: "Save a snapshot of the tree from a running member",
		Long: `Save a consistent snapshot of every znode, ACL and session from a running
member into FILE (written atomically). Seed a new ensemble from it with
"coordrun server --restore FILE" on each new member's empty data dir.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			servers, tc, err := serverFlags(v)
			if err != nil {
				return err
			}
			var lastErr error
			for _, s := range servers {
				zxid, n, err := saveSnapshot(s, args[0], v.GetDuration("timeout"), tc)
				if err != nil {
					lastErr = err
					continue
				}
				fmt.Fprintf(cmd.OutOrStdout(), "saved %s: %d znodes at zxid 0x%x from %s\n", args[0], n, zxid, s)
				return nil
			}
			return fmt.Errorf("no snapshot saved: %w", lastErr)
		},
	}
	addAdminFlags(save)
	cmd.AddCommand(save)
	return cmd
}

// saveSnapshot streams a snapshot from a member, checks it whole, and
// writes it to file atomically.
func saveSnapshot(server, file string, timeout time.Duration, tc *tls.Config) (int64, int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	snap, err := client.FourLetter(ctx, server, "snap", tc)
	if err != nil {
		return 0, 0, err
	}
	data := []byte(snap)
	if bytes.HasPrefix(data, []byte("error: ")) {
		return 0, 0, fmt.Errorf("%s: %s", server, bytes.TrimSpace(data))
	}
	zxid, t, err := ensemble.ReadBackup(bytes.NewReader(data))
	if err != nil {
		return 0, 0, fmt.Errorf("%s sent a bad snapshot: %w", server, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(file), ".coordrun-snapshot-*")
	if err != nil {
		return 0, 0, err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return 0, 0, err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return 0, 0, err
	}
	if err := tmp.Close(); err != nil {
		return 0, 0, err
	}
	if err := os.Rename(tmp.Name(), file); err != nil {
		return 0, 0, err
	}
	return zxid, t.NodeCount(), nil
}
