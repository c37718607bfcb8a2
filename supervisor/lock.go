package supervisor

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/coordrun/coordrun/supervisor/engine"
	"github.com/coordrun/coordrun/supervisor/state"
)

// The lock recipe is the engine's lock queue (see supervisor/engine): a
// queue of ephemeral sequential nodes, the run node that guards the handoff, the
// folder's record of the last holder, and the rules by which the next in
// line waits out a previous holder whose nodes someone else deleted. What
// the supervisor adds is the job: it starts only once the entry holds the
// lock and MustWait and the lock delay have passed, it is stopped when the
// holder's standing is lost (see holding.run), and the lock is released
// only after the job's whole process group is gone.

// withAccessHint tells coordrun's user how to get the access the store
// refused.
func withAccessHint(err error) error {
	if errors.Is(err, engine.ErrNoAuth) {
		return fmt.Errorf("%w; configure --auth or a client certificate that the ACL grants, or have an admin setAcl the folder", err)
	}
	return err
}

// holderInfo describes this process as a contender running argv (as
// recordedCommand keeps it); timeout and grace bound how long its job can
// outlive the loss of its standing.
func holderInfo(argv []string, full bool, timeout, grace time.Duration) state.HolderInfo {
	host, _ := os.Hostname()
	name := strconv.Itoa(os.Getuid())
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	// A queue node is read by every waiter: the command line is cut.
	cmd := strings.Join(recordedCommand(argv, full), " ")
	if len(cmd) > 512 {
		cmd = cmd[:512]
	}
	return state.HolderInfo{Host: host, PID: os.Getpid(), User: name, Command: cmd, Since: time.Now().UTC().Truncate(time.Millisecond),
		SessionTimeoutMS: timeout.Milliseconds(), KillGraceMS: grace.Milliseconds()}
}

// recordedCommand is what a record keeps of argv: its command's base
// name, or with full all of it.
func recordedCommand(argv []string, full bool) []string {
	if full || len(argv) == 0 {
		return argv
	}
	return []string{filepath.Base(argv[0])}
}
