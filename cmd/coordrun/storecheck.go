package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/coordrun/coordrun/ensemble"
	"github.com/spf13/cobra"
)

// storeCheckCommand is the hidden command that checks a raft store in a
// process of its own: bbolt panics on some damage on a goroutine no
// recover reaches, and such a panic must end the check, not the member.
const storeCheckCommand = "__check-store"

// exitDamaged is how the check's process says the file is damaged; its
// standard error then holds why.
const exitDamaged = 3

func newStoreCheckCommand() *cobra.Command {
	return &cobra.Command{
		Use:    storeCheckCommand + " FILE",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			err := ensemble.CheckStore(args[0])
			var de *ensemble.DamagedStoreError
			if errors.As(err, &de) {
				fmt.Fprintln(os.Stderr, de.Err)
				return exitError{code: exitDamaged}
			}
			return err
		},
	}
}

// checkStoreInChild runs CheckStore on path in a child process of this
// binary, and turns its exit (or its crash) into the member's error.
func checkStoreInChild(path string) error {
	exe, err := os.Executable()
	if err != nil {
		return ensemble.CheckStore(path)
	}
	var stderr bytes.Buffer
	c := exec.Command(exe, storeCheckCommand, path)
	c.Stderr = &stderr
	err = c.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return nil
	case !errors.As(err, &ee):
		return fmt.Errorf("checking %s: %w", path, err)
	}
	out := stderr.String()
	if ee.ExitCode() == exitDamaged {
		return &ensemble.DamagedStoreError{File: path, Err: errors.New(strings.TrimSpace(out))}
	}
	if i := strings.Index(out, "panic: "); i >= 0 {
		line, _, _ := strings.Cut(out[i:], "\n")
		return &ensemble.DamagedStoreError{File: path, Err: errors.New(line)}
	}
	return fmt.Errorf("checking %s: %v: %s", path, err, strings.TrimSpace(out))
}
