package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/coordrun/coordrun/ensemble"
	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/supervisor"
	"github.com/spf13/cobra"
	"github.com/spf13/viper"
)

// Membership changes and backups. Members accept both only from their
// administrator: over the member's admin socket (--admin-socket, as root
// or the member's uid), or over TCP from the member's host (loopback) or
// its --admin-from networks, authenticated as the super user: reconfig
// with the credentials of the member's --super-digest (--auth), a
// snapshot with a client certificate its --super-x509 names.

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
			return withAdminClient(reconfig("server."+args[0]+"="+args[1], ""))(cmd, args)
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
			return withAdminClient(reconfig("", args[0]))(cmd, args)
		},
	}
	addAdminFlags(cmd)
	return cmd
}

func addAdminFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.String("servers", "127.0.0.1:2181", "client addresses of members, host:port,...")
	f.String("admin-socket", "", "the member's admin socket (its --admin-socket) to use instead of --servers; needs root or the member's uid")
	f.Duration("timeout", 30*time.Second, "give up after this long")
	f.StringSlice("auth", nil, "digest credentials user:password of the member's --super-digest, over TCP (better: the admin socket, or auth: in a 0600 config file)")
	addClientTLSFlags(f)
}

// adminServers are the addresses an administrative command talks to: the
// admin socket when given, else --servers (with the client TLS flags).
func adminServers(v *viper.Viper) ([]string, *tls.Config, error) {
	if p := v.GetString("admin-socket"); p != "" {
		return []string{client.UnixPrefix + p}, nil, nil
	}
	return serverFlags(v)
}

// socketHint is what to add to a failure on the admin socket: who may use
// it. Empty without one.
func socketHint(v *viper.Viper) string {
	if v.GetString("admin-socket") == "" {
		return ""
	}
	return " (the admin socket serves root and the member's own user, or the uids of its --admin-socket-uids)"
}

// withAdminClient is withClient for administrative commands: the session
// goes to the admin socket when one is given.
func withAdminClient(run func(cmd *cobra.Command, args []string, s *clientSession) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		v, err := loadConfig(cmd)
		if err != nil {
			return err
		}
		servers, tlsCfg, err := adminServers(v)
		if err != nil {
			return err
		}
		auth, err := authFlag(v)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), v.GetDuration("timeout"))
		c, err := client.Connect(ctx, client.Config{Servers: servers, SessionTimeout: 10 * time.Second, TLS: tlsCfg, Auth: auth})
		if err != nil {
			cancel()
			return connectError(cmd, ctx, fmt.Errorf("connect to %s: %w%s", strings.Join(servers, ","), err, socketHint(v)))
		}
		s := &clientSession{v: v, c: c, ctx: ctx, cancel: cancel}
		defer s.close()
		return run(cmd, args, s)
	}
}

// reconfig asks for a membership change: joining "server.<id>=<peer
// address>", leaving an id.
func reconfig(joining, leaving string) func(*cobra.Command, []string, *clientSession) error {
	return func(cmd *cobra.Command, _ []string, s *clientSession) error {
		cfg, err := s.c.Reconfig(s.ctx, joining, leaving)
		switch {
		case errors.Is(err, wire.ErrNoAuth):
			return usageError{fmt.Errorf("membership change refused: %w: membership changes need an administrator: use --admin-socket PATH (as root or the member's user), or authenticate as the member's --super-digest with --auth", err)}
		case errors.Is(err, wire.ErrReconfigDisabled):
			return usageError{fmt.Errorf("membership change refused: %w: over TCP the member accepts them only from loopback and its --admin-from networks; run this on a member's host, or use --admin-socket", err)}
		case err != nil:
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
member into FILE (written atomically, mode 0600). Seed a new ensemble from it
with "coordrun server --restore FILE" on each new member's empty data dir.

Snapshots hold every znode whatever its ACL, so a member serves them only to
its administrator: over its admin socket (--admin-socket, as root or the
member's user), or over TLS to a client certificate its --super-x509 names.
Secrets are left out unless --with-digests asks for them: the password hash
of every digest ACL entry becomes "x" (user:x, which no password matches;
after a restore the super user sets those ACLs again) and session passwords
are replaced, so restored sessions cannot be resumed and simply expire.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			servers, tc, err := adminServers(v)
			if err != nil {
				return err
			}
			word := "snap"
			if v.GetBool("with-digests") {
				word = "snpf"
			}
			var lastErr error
			refused, unreachable := 0, 0
			for _, s := range servers {
				zxid, n, err := saveSnapshot(s, args[0], word, v.GetDuration("timeout"), tc)
				switch {
				case errors.Is(err, errSnapshotRefused):
					refused++
				case errors.Is(err, errSnapshotUnreachable):
					unreachable++
				}
				if err != nil {
					lastErr = err
					continue
				}
				fmt.Fprintf(cmd.OutOrStdout(), "saved %s: %d znodes at zxid 0x%x from %s\n", args[0], n, zxid, s)
				return nil
			}
			err = fmt.Errorf("no snapshot saved: %w%s", lastErr, socketHint(v))
			switch {
			case refused > 0 && refused+unreachable == len(servers):
				// Every member that answered wants an administrator, as
				// ensemble add and remove say for theirs.
				return usageError{err}
			case unreachable == len(servers):
				return exitError{code: supervisor.ExitUnavailable, err: err}
			}
			return err
		},
	}
	addAdminFlags(save)
	save.Flags().Bool("with-digests", false, "keep the digest ACL hashes and session passwords in the snapshot (treat FILE as a secret)")
	cmd.AddCommand(save)
	return cmd
}

// How saving a snapshot from one member failed, where the exit code
// tells them apart: the member wants an administrator, or it did not
// answer.
var (
	errSnapshotRefused     = errors.New("refused")
	errSnapshotUnreachable = errors.New("no answer")
)

// saveSnapshot streams a snapshot from a member, checks it whole, and
// writes it to file atomically.
func saveSnapshot(server, file, word string, timeout time.Duration, tc *tls.Config) (int64, int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	snap, err := client.FourLetter(ctx, server, word, tc)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %w", errSnapshotUnreachable, err)
	}
	data := []byte(snap)
	if why, ok := bytes.CutPrefix(data, []byte("error: ")); ok {
		switch why := string(bytes.TrimSpace(why)); why {
		case ensemble.SnapshotNeedsAdmin, ensemble.SnapshotNotFromHere:
			return 0, 0, fmt.Errorf("%s: %w: %s", server, errSnapshotRefused, why)
		}
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
