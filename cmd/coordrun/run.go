package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"

	"github.com/coordrun/coordrun/supervisor"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

const runLong = `Run a command only while holding a lock in the ensemble, so that of all the
hosts running the same coordrun command, exactly one runs the job at a time.

The command runs in its own process group with COORDRUN_FENCING_TOKEN (rises
with every new holder), COORDRUN_LOCK and COORDRUN_LOCK_NODE set. Terminating
signals (INT, TERM, HUP, QUIT) and USR1/USR2 are forwarded to its group. If
the session's lease runs out (members unreachable), the whole group is sent
SIGTERM, then SIGKILL after --kill-grace, so that it is gone before the lease
ends and another host can take the lock.

The lock's nodes get an ACL: with credentials (--auth, or a client
certificate), the session's identities get every permission and nobody else
anything, not even read, unless --acl adds it (--acl world:anyone:r);
without, they are open to every client, with a warning. They show the
command's name only, unless --record-command full. The command's
environment never holds COORDRUN_AUTH.
With --holders N, at most N hosts run the command at once, each with its
own fencing token; every contender of the lock must give the same N (one
that differs is refused, exit 64).
If another client deletes or changes the holder's nodes while the command
runs, the command is stopped (TERM, then KILL after --kill-grace) and
coordrun exits 78.

Exit codes: the command's own; 128+N if signal N killed it; 75 the lock was
not acquired (--try, --timeout); 76 the session was lost and the command
killed; 78 the lock was lost (its nodes deleted or changed by another
client) and the command stopped; 64 bad usage or no permission on the lock's
folder; 69 no ensemble member answered within the connect timeout.`

func addRunFlags(cmd *cobra.Command) {
	addSessionFlags(cmd)
	f := cmd.Flags()
	f.String("root", "/coordrun/locks", "znode folder holding every lock")
	f.String("name", "", "lock name (default: the command's base name)")
	f.Duration("lock-delay", 0, "after a holder's session ended without releasing, wait this long before starting")
	f.Duration("timeout", 0, "wait at most this long for the lock (0: forever)")
	f.Bool("try", false, "do not wait: exit 75 if the lock is held")
	f.Int("holders", 1, "let at most this many hosts run the command at once (a semaphore); every contender of the lock must give the same")
}

func newRunCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "run [flags] -- command [args...]",
		Short: "Run a command while holding a lock, on exactly one host at a time",
		Long:  runLong,
		Args:  cobra.ArbitraryArgs,
		RunE:  runRun,
	}
	addRunFlags(cmd)
	return cmd
}

func runRun(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return usageError{errors.New("no command given: coordrun run [flags] -- command [args...]")}
	}
	v, err := loadConfig(cmd)
	if err != nil {
		return err
	}
	sc, err := sessionOptions(cmd, v)
	if err != nil {
		return err
	}
	defer signal.Stop(sc.job.Signals)
	shell := v.GetBool("shell")
	opts := supervisor.Options{
		ConnOptions: sc.conn,
		JobOptions:  sc.job,
		LockOptions: supervisor.LockOptions{
			Root:      v.GetString("root"),
			Name:      v.GetString("name"),
			LockDelay: v.GetDuration("lock-delay"),
			Timeout:   v.GetDuration("timeout"),
			Try:       v.GetBool("try"),
			Holders:   v.GetInt("holders"),
		},
		Argv:   args,
		Log:    sc.log,
		Status: cmd.ErrOrStderr(),
		TTY:    term.IsTerminal(int(os.Stderr.Fd())) && !v.GetBool("quiet"),
	}
	if shell {
		opts.Argv = []string{"/bin/sh", "-c", strings.Join(args, " ")}
	}
	if opts.Name == "" {
		opts.Name = supervisor.DefaultName(args, shell)
	}
	if opts.Holders < 1 {
		return usageError{fmt.Errorf("--holders %d: want 1 (a lock, the default) or more", opts.Holders)}
	}
	// Checked before the name is echoed: a bad one is said once, cut short.
	if err := opts.Validate(); err != nil {
		return usageError{err}
	}
	if !v.GetBool("quiet") {
		fmt.Fprintf(cmd.ErrOrStderr(), "coordrun: lock %q\n", opts.Name)
	}
	// Signals are handled by the supervisor, not by cancelling a context.
	return exitFrom(supervisor.Run(context.Background(), opts))
}
