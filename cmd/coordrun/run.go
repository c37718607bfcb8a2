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

The lock is --name, or else named after the whole command line: the
command's base name, '-' and the first 8 hex digits of the SHA-256 of its
words (as given, NUL-separated; with --shell, of "/bin/sh -c SCRIPT"), as
backup.sh-3f2a9c1e. Every host running the same command line, word for
word, takes the same lock, and unrelated commands (python3 a.py, python3
b.py) never share one. -v prints the name chosen; status lists it.

coordrun itself prints nothing on a good day: the job's output, coordrun's
errors and warnings (such as one notice when the lock's nodes are open to
every client), nothing else; -v says what it does, -q leaves only errors.

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
not acquired (--try, --timeout; --conflict-exit-code chooses another, and
-q leaves it unsaid on stderr); 76 the session was lost and the command
killed; 78 the lock was lost (its nodes deleted or changed by another
client) and the command stopped; 64 bad usage or no permission on the lock's
folder; 69 no ensemble member answered within the connect timeout.`

func addRunFlags(cmd *cobra.Command) {
	addSessionFlags(cmd)
	f := cmd.Flags()
	f.String("root", "/coordrun/locks", "znode folder holding every lock")
	f.String("name", "", "lock name (default: the command's base name and a hash of the whole command line, as backup-3f2a9c1e; see --help)")
	f.Duration("lock-delay", 0, "after a holder's session ended without releasing, wait this long before starting")
	f.Duration("timeout", 0, "wait at most this long for the lock (0: forever)")
	f.Bool("try", false, "do not wait: exit 75 if the lock is held")
	f.Int("holders", 1, "let at most this many hosts run the command at once (a semaphore); every contender of the lock must give the same")
	f.Int("conflict-exit-code", supervisor.ExitNotAcquired, "exit code when the lock is not acquired (--try, --timeout), as flock -E; 0 makes losing a success")
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	cmd.Annotations[quietByDefault] = "yes"
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
	if err := useEtcd(cmd, v, &sc.conn, "locks"); err != nil {
		return err
	}
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
	conflict := v.GetInt("conflict-exit-code")
	if conflict < 0 || conflict > 255 {
		return usageError{fmt.Errorf("--conflict-exit-code %d: want 0 to 255", conflict)}
	}
	if v.GetString("name") == "" {
		sc.log.Info("lock named after the command line (--name chooses one)", "lock", opts.Name)
	} else {
		sc.log.Info("lock", "lock", opts.Name)
	}
	// Signals are handled by the supervisor, not by cancelling a context.
	code, err := supervisor.Run(context.Background(), opts)
	if code == supervisor.ExitUnavailable && err != nil {
		err = fmt.Errorf("%w%s", err, defaultServersHint(v))
	}
	if code == supervisor.ExitNotAcquired {
		code = conflict
		// Under -q losing is the expected outcome on every host but one
		// (a crontab's --try): the exit code says it, mail does not.
		if v.GetBool("quiet") {
			err = nil
		}
	}
	return exitFrom(code, err)
}
