package main

import (
	"errors"
	"fmt"

	"github.com/coordrun/coordrun/ensemble"
	"github.com/coordrun/coordrun/ensemble/client/recipe"
	"github.com/coordrun/coordrun/supervisor"
)

// The exit codes are supervisor's table (supervisor/exit.go); these name
// the ones the commands return themselves.
const (
	exitOK         = supervisor.ExitOK
	exitFailure    = supervisor.ExitFailure
	exitUsage      = supervisor.ExitUsage
	exitStaleToken = supervisor.ExitStaleToken
)

// usageError marks errors caused by the invocation rather than the
// system; the supervisor says the same with ExitUsage.
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

// exitFrom turns a supervisor outcome into the command's error.
func exitFrom(code int, err error) error {
	if code == exitOK && err == nil {
		return nil
	}
	return exitError{code: code, err: err}
}

// exitStatus maps a command's error to the process's exit code and what
// to print, in one place: an exitError's code; a usage error, a member's
// invalid configuration (ensemble.ErrConfig) or a lock folder the session
// may not join is bad usage; a cron job never registered is not found;
// anything else a failure.
func exitStatus(err error) (int, error) {
	var ee exitError
	var ue usageError
	var ae *recipe.AccessError
	switch {
	case err == nil:
		return exitOK, nil
	case errors.As(err, &ee):
		return ee.code, ee.err
	case errors.As(err, &ue), errors.Is(err, ensemble.ErrConfig), errors.As(err, &ae):
		return exitUsage, err
	case errors.Is(err, supervisor.ErrNoJob):
		return supervisor.ExitNotFound, err
	}
	return exitFailure, err
}
