package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/supervisor"
	"github.com/spf13/cobra"
	"github.com/spf13/viper"
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

The lock's nodes get an ACL (--acl): with credentials (--auth, or a client
certificate), the session's identities get every permission and everyone
else may only read; without, they are open to every client, with a warning.
If another client deletes or changes the holder's nodes while the command
runs, the command is stopped (TERM, then KILL after --kill-grace) and
coordrun exits 78.

Exit codes: the command's own; 128+N if signal N killed it; 75 the lock was
not acquired (--try, --timeout); 76 the session was lost and the command
killed; 78 the lock was lost (its nodes deleted or changed by another
client) and the command stopped; 64 bad usage, no permission on the lock's
folder, or no ensemble reachable.`

// addSessionFlags adds what every command that holds a session and runs
// jobs needs: where the ensemble is, and how jobs are stopped when the
// session's lease runs out.
func addSessionFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.String("servers", "127.0.0.1:2181", "ensemble members, host:port,...")
	f.Duration("session-timeout", 10*time.Second, "session timeout to request")
	f.Duration("kill-grace", 2*time.Second, "time between SIGTERM and SIGKILL when the lease runs out")
	f.Duration("drift-margin", 250*time.Millisecond, "safety margin subtracted from every lease, for clock rate differences")
	f.Duration("zookeeper-margin", 2*time.Second, "extra margin against Apache ZooKeeper, whose followers answer pings on their own")
	f.StringSlice("auth", nil, "digest credentials user:password (repeatable)")
	f.String("acl", "", "ACL of the nodes coordrun creates, scheme:id:perms,... (default: the session's identities cdrwa and world:anyone:r with credentials, else open)")
	f.Bool("shell", false, "run the command through sh -c")
	f.BoolP("verbose", "v", false, "log more")
	f.BoolP("quiet", "q", false, "log only errors")
	f.String("log-format", "text", "log format on stderr: text or json")
	addClientTLSFlags(f)
}

func addRunFlags(cmd *cobra.Command) {
	addSessionFlags(cmd)
	f := cmd.Flags()
	f.String("root", "/coordrun/locks", "znode folder holding every lock")
	f.String("name", "", "lock name (default: the command's base name)")
	f.Duration("lock-delay", 0, "after a holder's session ended without releasing, wait this long before starting")
	f.Duration("timeout", 0, "wait at most this long for the lock (0: forever)")
	f.Bool("try", false, "do not wait: exit 75 if the lock is held")
}

// sessionOptions reads the flags of addSessionFlags into supervisor
// options, with the job environment, the watchdog binary and signal
// forwarding set up. The caller must signal.Stop(opts.Signals).
func sessionOptions(cmd *cobra.Command, v *viper.Viper) (supervisor.Options, error) {
	level := "info"
	if v.GetBool("verbose") {
		level = "debug"
	}
	if v.GetBool("quiet") {
		level = "error"
	}
	log, err := newLogger(cmd.ErrOrStderr(), v.GetString("log-format"), level)
	if err != nil {
		return supervisor.Options{}, err
	}
	exe, err := os.Executable()
	if err != nil {
		return supervisor.Options{}, err
	}
	var auth []client.Auth
	for _, a := range v.GetStringSlice("auth") {
		if !strings.Contains(a, ":") {
			return supervisor.Options{}, usageError{fmt.Errorf("--auth %q: want user:password", a)}
		}
		auth = append(auth, client.Auth{Scheme: "digest", Secret: []byte(a)})
	}
	servers := splitServers(v.GetString("servers"))
	if len(servers) == 0 {
		return supervisor.Options{}, usageError{errors.New("--servers is empty")}
	}
	tlsCfg, err := clientTLS(v)
	if err != nil {
		return supervisor.Options{}, err
	}
	var acl []wire.ACL
	if s := v.GetString("acl"); s != "" {
		if acl, err = supervisor.ParseACL(s); err != nil {
			return supervisor.Options{}, usageError{fmt.Errorf("--acl: %w", err)}
		}
	}
	// Every signal that would end coordrun goes to the job instead; the
	// supervisor decides when to stop.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	return supervisor.Options{
		Servers:        servers,
		SessionTimeout: v.GetDuration("session-timeout"),
		Auth:           auth,
		TLS:            tlsCfg,
		ACL:            acl,
		Env:            os.Environ(),
		KillGrace:      v.GetDuration("kill-grace"),
		DriftMargin:    v.GetDuration("drift-margin"),
		ExtraMargin:    v.GetDuration("zookeeper-margin"),
		Exe:            exe,
		Signals:        sigs,
		Log:            log,
		Status:         cmd.ErrOrStderr(),
		TTY:            term.IsTerminal(int(os.Stderr.Fd())) && !v.GetBool("quiet"),
	}, nil
}

// exitFrom maps a supervisor outcome to the process's exit.
func exitFrom(code int, err error) error {
	var ue supervisor.UsageError
	if errors.As(err, &ue) {
		return usageError{ue.Err}
	}
	var ae *supervisor.AccessError
	if errors.As(err, &ae) {
		return usageError{err}
	}
	if code == 0 && err == nil {
		return nil
	}
	return exitError{code: code, err: err}
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
	opts, err := sessionOptions(cmd, v)
	if err != nil {
		return err
	}
	defer signal.Stop(opts.Signals)
	shell := v.GetBool("shell")
	opts.Argv = args
	if shell {
		opts.Argv = []string{"/bin/sh", "-c", strings.Join(args, " ")}
	}
	opts.Name = v.GetString("name")
	if opts.Name == "" {
		opts.Name = supervisor.DefaultName(args, shell)
	}
	opts.Root = v.GetString("root")
	opts.LockDelay = v.GetDuration("lock-delay")
	opts.Timeout = v.GetDuration("timeout")
	opts.Try = v.GetBool("try")
	if !v.GetBool("quiet") {
		fmt.Fprintf(cmd.ErrOrStderr(), "coordrun: lock %q\n", opts.Name)
	}
	// Signals are handled by the supervisor, not by cancelling a context.
	return exitFrom(supervisor.Run(context.Background(), opts))
}
