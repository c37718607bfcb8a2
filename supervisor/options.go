package supervisor

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/supervisor/engine"
)

// ConnOptions say how a supervisor reaches the ensemble, what its lease is
// worth, and what the nodes it creates look like.
type ConnOptions struct {
	Servers        []string
	SessionTimeout time.Duration
	// SessionTimeoutGiven: the user asked for SessionTimeout (a flag, the
	// environment, the config file); members granting another is then an
	// error naming their limit, where for the default it is a warning.
	SessionTimeoutGiven bool
	Auth                []client.Auth
	TLS                 *tls.Config
	DriftMargin         time.Duration // subtracted from every lease, for clock rate differences
	// ExtraMargin is added to DriftMargin when the ensemble is Apache
	// ZooKeeper, whose followers answer pings without the leader.
	ExtraMargin time.Duration
	// ACL is added to the ACL of every node coordrun creates: the
	// session's authenticated identities (--auth, a client certificate)
	// get every permission and no one else anything, unless ACL grants
	// it (world:anyone:r lets everyone read the records). Without
	// credentials ACL is the whole ACL; nil then means the open ACL, with
	// a warning. See recordACL.
	ACL []wire.ACL
	// Dial, if set, opens the session on another engine than the
	// ZooKeeper protocol (etcd), which Servers, Auth and ACL then do not
	// configure.
	Dial func(ctx context.Context, log *slog.Logger) (engine.Conn, error)
	// RecordCommand says how much of a job's command line its records
	// (lock nodes, cron job definitions) show to whoever may read them:
	// RecordName (the default, also for "") or RecordFull.
	RecordCommand string
}

// What the records keep of a job's command line. Arguments carry secrets
// (a --db-password=...), and the records are read by every holder of the
// lock's identity, by `coordrun status`, and by whoever the ACL lets read.
const (
	RecordName = "name" // the command's base name: argv[0] without its folder
	RecordFull = "full" // the whole command line (a lock node keeps its first 512 bytes)
)

// recordFull reports whether records keep the whole command line.
func (o ConnOptions) recordFull() bool { return o.RecordCommand == RecordFull }

// checkRecordCommand checks --record-command.
func checkRecordCommand(s string) error {
	switch s {
	case "", RecordName, RecordFull:
		return nil
	}
	return fmt.Errorf("--record-command %q: want %s or %s", s, RecordName, RecordFull)
}

// JobOptions say how jobs are started, signalled and stopped.
type JobOptions struct {
	Exe       string         // the coordrun binary, which runs the watchdog
	Env       []string       // the jobs' environment (nil: this process's); credentials are taken out (JobEnv)
	KillGrace time.Duration  // SIGTERM to SIGKILL
	Signals   chan os.Signal // terminating and user signals to forward
}

// LockOptions say which lock a run takes and how it waits for it.
type LockOptions struct {
	Root      string        // folder of all locks, e.g. /coordrun/locks
	Name      string        // the lock's name
	LockDelay time.Duration // wait after a predecessor's session ended uncleanly
	Timeout   time.Duration // longest wait for the lock; 0 waits forever
	Try       bool          // do not wait at all
	// Holders is how many contenders may hold the lock at once (a
	// semaphore, engine.EnterSemaphore); 0 or 1: a lock.
	Holders int
}

// Options configure one supervised run.
type Options struct {
	ConnOptions
	JobOptions
	LockOptions
	Argv   []string // the job
	Log    *slog.Logger
	Status io.Writer // where the waiting status goes (stderr)
	TTY    bool      // Status is a terminal: redraw one status line
}

// Validate checks the run's command, its lock and the timing constraints:
// the job must survive an ordinary ping gap, so the grace and margin must
// leave room for it.
func (o *Options) Validate() error {
	if len(o.Argv) == 0 {
		return errors.New("no command given")
	}
	if err := checkName("lock", o.Name); err != nil {
		return err
	}
	if err := checkRoot("lock", o.Root); err != nil {
		return err
	}
	if o.LockDelay < 0 || o.Timeout < 0 {
		return errNegative
	}
	if err := engine.CheckHolders(o.Holders); err != nil {
		return err
	}
	if err := checkRecordCommand(o.RecordCommand); err != nil {
		return err
	}
	return checkTiming(o.ConnOptions, o.JobOptions)
}

var errNegative = errors.New("durations must not be negative, and the session timeout must be positive")

// checkTiming checks the durations of a session that runs jobs.
func checkTiming(c ConnOptions, j JobOptions) error {
	if c.SessionTimeout <= 0 || j.KillGrace < 0 || c.DriftMargin < 0 {
		return errNegative
	}
	if budget := c.SessionTimeout / 2; j.KillGrace+c.DriftMargin+killSlack > budget {
		return fmt.Errorf("--kill-grace %v + drift margin %v must stay under half the session timeout (%v)", j.KillGrace, c.DriftMargin, budget)
	}
	return nil
}
