package main

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/coordrun/coordrun/ensemble"
	"github.com/coordrun/coordrun/ensemble/client/recipe"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/supervisor"
)

// Every command's error maps to the process's exit in one place.
func TestExitStatus(t *testing.T) {
	boom := errors.New("boom")
	for _, c := range []struct {
		name string
		err  error
		code int
		msg  string // "" for nothing printed
	}{
		{"success", nil, 0, ""},
		{"failure", boom, 1, "boom"},
		{"usage", usageError{boom}, exitUsage, "boom"},
		{"usage, wrapped", fmt.Errorf("flag: %w", usageError{boom}), exitUsage, "flag: boom"},
		{"member configuration", fmt.Errorf("%w: --id is required", ensemble.ErrConfig), exitUsage, "invalid member configuration: --id is required"},
		{"lock folder refused", &recipe.AccessError{Path: "/l", Err: wire.ErrNoAuth}, exitUsage, (&recipe.AccessError{Path: "/l", Err: wire.ErrNoAuth}).Error()},
		{"job's own code", exitError{code: 3}, 3, ""},
		{"stale token", exitError{code: exitStaleToken, err: boom}, 77, "boom"},
		{"session lost", exitFrom(supervisor.ExitSessionLost, boom), 76, "boom"},
		{"supervisor usage", exitFrom(supervisor.ExitUsage, boom), 64, "boom"},
		{"job exited 0", exitFrom(0, nil), 0, ""},
	} {
		code, err := exitStatus(c.err)
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		if code != c.code || msg != c.msg {
			t.Errorf("%s: exit %d printing %q, want %d printing %q", c.name, code, msg, c.code, c.msg)
		}
	}
}

// The exit codes stay distinct: a job can pass any of them through
// coordrun run.
func TestExitCodesDistinct(t *testing.T) {
	codes := []int{supervisor.ExitOK, supervisor.ExitFailure, supervisor.ExitUsage, supervisor.ExitNotFound, supervisor.ExitUnavailable, supervisor.ExitNotAcquired,
		supervisor.ExitSessionLost, supervisor.ExitStaleToken, supervisor.ExitLockLost}
	sorted := slices.Clone(codes)
	slices.Sort(sorted)
	if len(slices.Compact(sorted)) != len(codes) {
		t.Errorf("exit codes %v repeat one", codes)
	}
	for _, c := range codes[2:] {
		if c > 125 {
			t.Errorf("exit code %d collides with 128+signal", c)
		}
	}
}

func TestSplitServers(t *testing.T) {
	for in, want := range map[string][]string{
		"":                          nil,
		" , ,":                      nil,
		"a:1":                       {"a:1"},
		"a:1, b:2 ,,c:3":            {"a:1", "b:2", "c:3"},
		"[::1]:2181,127.0.0.1:2181": {"[::1]:2181", "127.0.0.1:2181"},
	} {
		if got := splitServers(in); !slices.Equal(got, want) {
			t.Errorf("splitServers(%q) = %q, want %q", in, got, want)
		}
	}
}
