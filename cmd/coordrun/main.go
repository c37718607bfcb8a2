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

// exitError ends the process with a specific code; err, when set, is
// printed first. coordrun run passes its job's exit code this way.
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}
func (e exitError) Unwrap() error { return e.err }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRootCommand()
	err := root.ExecuteContext(ctx)
	if err == nil {
		os.Exit(exitOK)
	}
	var ee exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintln(os.Stderr, "coordrun:", ee.err)
		}
		os.Exit(ee.code)
	}
	fmt.Fprintln(os.Stderr, "coordrun:", err)
	var ue usageError
	if errors.As(err, &ue) {
		os.Exit(exitUsage)
	}
	os.Exit(1)
}
