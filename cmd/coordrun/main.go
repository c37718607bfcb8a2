// Command coordrun is a ZooKeeper-compatible coordination service on raft
// (coordrun server) and a supervisor that runs a job on exactly one host
// at a time.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// Exit codes shared by every subcommand. A supervised child's own code is
// passed through unchanged, so these sit where shells and cron rarely look.
const (
	exitOK    = 0
	exitUsage = 64 // EX_USAGE: bad flags, bad config, cannot connect
)

// usageError marks errors caused by the invocation rather than the system.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRootCommand()
	err := root.ExecuteContext(ctx)
	if err == nil {
		os.Exit(exitOK)
	}
	fmt.Fprintln(os.Stderr, "coordrun:", err)
	var ue usageError
	if errors.As(err, &ue) {
		os.Exit(exitUsage)
	}
	os.Exit(1)
}
