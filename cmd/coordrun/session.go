package main

// Client plumbing shared by the commands: the flags that say where the
// ensemble is and how to reach it, the session options of the commands
// that run jobs, and the short session of the commands that inspect or
// administer.

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/ensemble/client/recipe"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/supervisor"
	"github.com/coordrun/coordrun/supervisor/engine"
	"github.com/coordrun/coordrun/supervisor/engine/etcdengine"
	"github.com/spf13/cobra"
	"github.com/spf13/viper"
)

func splitServers(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// serverFlags reads --servers and the client TLS flags.
func serverFlags(v *viper.Viper) ([]string, *tls.Config, error) {
	servers, err := parseServers(v.GetString("servers"))
	if err != nil {
		return nil, nil, usageError{err}
	}
	tc, err := clientTLS(v)
	if err != nil {
		return nil, nil, err
	}
	return servers, tc, nil
}

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
	f.StringSlice("auth", nil, "digest credentials user:password (repeatable); visible in ps: prefer auth: in a 0600 config file")
	f.String("acl", "", "entries added to the ACL of the nodes coordrun creates, scheme:id:perms,... e.g. world:anyone:r (default: only the session's identities, cdrwa, with credentials; else the open ACL)")
	f.String("record-command", supervisor.RecordName, "what lock and cron records show of the command: name (its base name) or full (the whole command line, arguments and all)")
	f.Bool("shell", false, "run the command through sh -c")
	f.BoolP("verbose", "v", false, "log what coordrun does (the lock's name, waiting, acquired, the job's end)")
	f.BoolP("quiet", "q", false, "log only errors; a lock not acquired (--try, --timeout) is said by the exit code alone")
	f.String("log-format", "text", "log format on stderr: text or json")
	addClientTLSFlags(f)
	addEtcdFlags(f)
}

// quietByDefault marks a command (run) that logs only warnings and errors
// unless -v: it runs from crontabs, where any line of its own is mail from
// every host on every run, and a job's output is the job's to give.
const quietByDefault = "coordrun.quiet-by-default"

// sessionConfig is what the flags of addSessionFlags configure.
type sessionConfig struct {
	conn supervisor.ConnOptions
	job  supervisor.JobOptions
	log  *slog.Logger
}

// sessionOptions reads the flags of addSessionFlags, with the job
// environment, the watchdog binary and signal forwarding set up. The
// caller must signal.Stop(cfg.job.Signals).
func sessionOptions(cmd *cobra.Command, v *viper.Viper) (sessionConfig, error) {
	level := "info"
	if cmd.Annotations[quietByDefault] != "" {
		level = "warn"
	}
	if v.GetBool("verbose") {
		level = "debug"
	}
	if v.GetBool("quiet") {
		level = "error"
	}
	log, err := newLogger(cmd.ErrOrStderr(), v.GetString("log-format"), level)
	if err != nil {
		return sessionConfig{}, err
	}
	exe, err := os.Executable()
	if err != nil {
		return sessionConfig{}, err
	}
	auth, err := authFlag(v)
	if err != nil {
		return sessionConfig{}, err
	}
	servers, tlsCfg, err := serverFlags(v)
	if err != nil {
		return sessionConfig{}, err
	}
	var acl []wire.ACL
	if s := v.GetString("acl"); s != "" {
		if acl, err = recipe.ParseACL(s); err != nil {
			return sessionConfig{}, usageError{fmt.Errorf("--acl: %w", err)}
		}
	}
	// Every signal that would end coordrun goes to the job instead; the
	// supervisor decides when to stop.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	return sessionConfig{
		conn: supervisor.ConnOptions{
			Servers:        servers,
			SessionTimeout: v.GetDuration("session-timeout"),
			// Set by a flag, COORDRUN_SESSION_TIMEOUT or the config file.
			SessionTimeoutGiven: v.IsSet("session-timeout"),
			Auth:                auth,
			TLS:                 tlsCfg,
			ACL:                 acl,
			RecordCommand:       v.GetString("record-command"),
			DriftMargin:         v.GetDuration("drift-margin"),
			ExtraMargin:         v.GetDuration("zookeeper-margin"),
		},
		job: supervisor.JobOptions{
			Exe:       exe,
			Env:       supervisor.JobEnv(os.Environ()),
			KillGrace: v.GetDuration("kill-grace"),
			Signals:   sigs,
		},
		log: log,
	}, nil
}

// authFlag reads --auth: digest credentials, user:password each.
func authFlag(v *viper.Viper) ([]client.Auth, error) {
	var auth []client.Auth
	for _, a := range v.GetStringSlice("auth") {
		if !strings.Contains(a, ":") {
			return nil, usageError{fmt.Errorf("--auth %q: want user:password", a)}
		}
		auth = append(auth, client.Auth{Scheme: "digest", Secret: []byte(a)})
	}
	return auth, nil
}

// addInspectFlags adds the flags of a command that opens a short session
// to read what is under --root (default root, described by rootUsage).
func addInspectFlags(cmd *cobra.Command, root, rootUsage string) {
	f := cmd.Flags()
	f.String("servers", "127.0.0.1:2181", "ensemble members, host:port,...")
	f.String("root", root, rootUsage)
	f.Bool("json", false, "print JSON")
	f.Duration("timeout", 10*time.Second, "give up after this long")
	f.StringSlice("auth", nil, "digest credentials user:password (repeatable), for nodes whose ACL wants them")
	addClientTLSFlags(f)
	addEtcdFlags(f)
}

// clientSession is a client command's configuration, its session and its
// deadline (--timeout).
type clientSession struct {
	v      *viper.Viper
	c      *client.Client
	e      engine.Conn // on etcd (--servers etcd://...), instead of c
	ctx    context.Context
	cancel context.CancelFunc
}

// connectCommand loads cmd's configuration and opens a session with it
// from its --servers, --timeout and TLS flags. The context bounds the
// whole command; close the session when done.
func connectCommand(cmd *cobra.Command) (*clientSession, error) {
	v, err := loadConfig(cmd)
	if err != nil {
		return nil, err
	}
	servers, tlsCfg, err := serverFlags(v)
	if err != nil {
		return nil, err
	}
	auth, err := authFlag(v)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), v.GetDuration("timeout"))
	if etcdengine.IsEtcd(v.GetString("servers")) {
		e, err := connectEtcd(ctx, cmd, v)
		if err != nil {
			cancel()
			return nil, err
		}
		return &clientSession{v: v, e: e, ctx: ctx, cancel: cancel}, nil
	}
	c, err := client.Connect(ctx, client.Config{Servers: servers, SessionTimeout: 10 * time.Second, TLS: tlsCfg, Auth: auth})
	if err != nil {
		cancel()
		return nil, connectError(cmd, ctx, fmt.Errorf("connect to %s: %w%s", strings.Join(servers, ","), err, defaultServersHint(v)))
	}
	return &clientSession{v: v, c: c, ctx: ctx, cancel: cancel}, nil
}

// connectError classes a failed connect: no member answering before the
// deadline is unavailable (69: trying again later can help); a refusal
// (a certificate, credentials) is bad usage (64).
func connectError(cmd *cobra.Command, ctx context.Context, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) && cmd.Context().Err() == nil {
		return exitError{code: supervisor.ExitUnavailable, err: err}
	}
	return usageError{err}
}

func (s *clientSession) close() {
	if s.e != nil {
		s.e.Close()
	} else {
		s.c.Close()
	}
	s.cancel()
}

// store is the session as the supervisor's engine sees it.
func (s *clientSession) store() engine.Conn {
	if s.e != nil {
		return s.e
	}
	return storeOf(s.c)
}

// withClient is the RunE of a command that works on a short session:
// run gets the session, which is closed when run returns.
func withClient(run func(cmd *cobra.Command, args []string, s *clientSession) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		s, err := connectCommand(cmd)
		if err != nil {
			return err
		}
		defer s.close()
		return noAuthHint(run(cmd, args, s), len(s.v.GetStringSlice("auth")) > 0)
	}
}

// noAuthHint says what to do about a record the session may not read or
// change: with credentials, coordrun's records are readable only by the
// identities that wrote them. No permission is bad usage (64): retrying
// cannot help.
func noAuthHint(err error, haveAuth bool) error {
	if !errors.Is(err, wire.ErrNoAuth) {
		return err
	}
	if haveAuth {
		return usageError{fmt.Errorf("%w (the node's ACL does not grant your credentials; its writers' --acl can add them)", err)}
	}
	return usageError{fmt.Errorf("%w (the node's ACL wants credentials: records written with credentials are readable only by them; give auth: user:password in a 0600 config file, or --auth user:password, or have the writers add --acl world:anyone:r)", err)}
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
