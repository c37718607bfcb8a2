package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"text/tabwriter"

	"github.com/coordrun/coordrun/fencing"
	"github.com/spf13/cobra"
	"github.com/spf13/viper"
)

const fenceCheckLong = `Check a lock holder's fencing token against the high-water mark that a
resource keeps in a state file, and raise the mark.

A token at or above the lock's mark is accepted (exit 0) and becomes the new
mark; an equal token is accepted because one run may write many times. A
lower token means a newer holder of the lock has already written to this
resource: the command exits 77 and says so on stderr. A job that was frozen
past its session and resumed after the lock moved on stops there.

The token defaults to $COORDRUN_FENCING_TOKEN and the lock to
$COORDRUN_LOCK, both set by coordrun run for its job. Concurrent checks on
one state file, from any number of processes, are serialized by flock(2)
on FILE.lock; each raised mark is fsynced before the command exits.

Exit codes: 0 accepted; 77 stale token; 64 bad usage (no token, bad number,
no lock name, unreadable or corrupt state file); 1 the mark could not be
written.`

func newFenceCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fence",
		Short: "Reject writes from stale lock holders with fencing tokens",
	}
	cmd.AddCommand(newFenceCheckCommand(), newFenceShowCommand())
	return cmd
}

func newFenceCheckCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "check --state FILE [--lock NAME] [--token N]",
		Short: "Accept a fencing token (exit 0, raise the mark) or reject a stale one (exit 77)",
		Long:  fenceCheckLong,
		Args:  fenceNoArgs,
		RunE:  runFenceCheck,
	}
	f := cmd.Flags()
	f.String("state", "", "the resource's fencing state file (created on first accept; its directory must exist)")
	f.String("lock", "", "lock name (default $"+fencing.EnvLock+")")
	f.String("token", "", "fencing token (default $"+fencing.EnvToken+")")
	return cmd
}

func runFenceCheck(cmd *cobra.Command, _ []string) error {
	v, err := fenceConfig(cmd)
	if err != nil {
		return err
	}
	raw := v.GetString("token")
	if raw == "" {
		return usageError{fmt.Errorf("no fencing token: pass --token or set %s", fencing.EnvToken)}
	}
	tok, err := fencing.Parse(raw)
	if err != nil {
		from := fencing.EnvToken
		if cmd.Flags().Changed("token") {
			from = "--token"
		}
		return usageError{fmt.Errorf("%s: %w", from, err)}
	}
	lock := v.GetString("lock")
	if lock == "" {
		return usageError{fmt.Errorf("no lock name: pass --lock or set %s", fencing.EnvLock)}
	}
	g, err := openFenceGuard(v)
	if err != nil {
		return err
	}
	err = g.Accept(lock, tok)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fencing.ErrStaleToken):
		return exitError{code: exitStaleToken, err: err}
	case errors.Is(err, fencing.ErrCorruptState), errors.Is(err, fs.ErrPermission):
		return usageError{err}
	}
	return err
}

func newFenceShowCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "show --state FILE",
		Short: "Print the high-water mark of every lock in a fencing state file",
		Args:  fenceNoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, err := fenceConfig(cmd)
			if err != nil {
				return err
			}
			g, err := openFenceGuard(v)
			if err != nil {
				return err
			}
			// A guard that has accepted nothing has no file, but so has a
			// mistyped path; showing nothing would hide the typo.
			if _, err := os.Stat(g.Path()); err != nil {
				return usageError{fmt.Errorf("state file: %w (no token accepted yet?)", err)}
			}
			marks, err := g.Marks()
			if err != nil {
				return usageError{err}
			}
			if v.GetBool("json") {
				return writeJSON(cmd.OutOrStdout(), map[string]any{"locks": marks})
			}
			printMarks(cmd.OutOrStdout(), marks)
			return nil
		},
	}
	f := cmd.Flags()
	f.String("state", "", "the resource's fencing state file")
	f.Bool("json", false, `print JSON, in the state file's format {"locks": {"name": token}}`)
	return cmd
}

func printMarks(w io.Writer, marks map[string]fencing.Token) {
	locks := make([]string, 0, len(marks))
	for l := range marks {
		locks = append(locks, l)
	}
	slices.Sort(locks)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LOCK\tHIGH-WATER")
	for _, l := range locks {
		fmt.Fprintf(tw, "%s\t%d\n", l, marks[l])
	}
	tw.Flush()
}

// fenceConfig resolves the fence flags like every command's (flag >
// COORDRUN_* > config file), with one addition: the token also comes from
// COORDRUN_FENCING_TOKEN, the variable coordrun run sets. --lock already
// reads COORDRUN_LOCK by the general rule.
func fenceConfig(cmd *cobra.Command) (*viper.Viper, error) {
	v, err := loadConfig(cmd)
	if err != nil {
		return nil, err
	}
	if cmd.Flags().Lookup("token") != nil {
		if err := v.BindEnv("token", fencing.EnvToken); err != nil {
			return nil, err
		}
	}
	return v, nil
}

func openFenceGuard(v *viper.Viper) (*fencing.Guard, error) {
	state := v.GetString("state")
	if state == "" {
		return nil, usageError{errors.New("--state is required: the resource's fencing state file")}
	}
	g, err := fencing.OpenGuard(state)
	if err != nil {
		return nil, usageError{err}
	}
	return g, nil
}

// fenceNoArgs is cobra.NoArgs as a usage error (exit 64).
func fenceNoArgs(cmd *cobra.Command, args []string) error {
	if err := cobra.NoArgs(cmd, args); err != nil {
		return usageError{err}
	}
	return nil
}
