package main

import (
	"os"
	"strconv"
	"time"

	"github.com/coordrun/coordrun/supervisor"
	"github.com/spf13/cobra"
)

// newWatchdogCommand is the hidden process that guards a running job; the
// supervisor starts it with the control pipe on fd 3 and the report pipe
// on fd 4.
func newWatchdogCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:    supervisor.WatchdogCommand + " --grace D (--deadline NS | --armed) -- command...",
		Hidden: true,
		Args:   cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			grace, _ := cmd.Flags().GetDuration("grace")
			dl, _ := cmd.Flags().GetString("deadline")
			armed, _ := cmd.Flags().GetBool("armed")
			deadline, err := strconv.ParseInt(dl, 10, 64)
			if err != nil {
				return usageError{err}
			}
			code := supervisor.RunWatchdog(supervisor.WatchdogConfig{
				Argv:     args,
				Grace:    grace,
				Deadline: supervisor.Boottime(deadline),
				Armed:    armed,
				Control:  os.NewFile(3, "control"),
				Report:   os.NewFile(4, "report"),
			})
			if code == 0 {
				return nil
			}
			return exitError{code: code}
		},
	}
	cmd.Flags().Duration("grace", 2*time.Second, "")
	cmd.Flags().String("deadline", "0", "")
	cmd.Flags().Bool("armed", false, "")
	// Says that the job's lock environment comes over the control pipe (E
	// lines, supervisor/wdproto.go). The watchdog reads them either way;
	// the flag is there so that an older binary, which would ignore them
	// and run the job without its fencing token, refuses to start.
	cmd.Flags().Bool(supervisor.WatchdogLockEnvFlag, false, "")
	return cmd
}
