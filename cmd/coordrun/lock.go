package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/supervisor"
	"github.com/coordrun/coordrun/supervisor/engine"
	"github.com/spf13/cobra"
)

// Lock folders stay after their last use (the folder keeps the last
// holder's record, and re-creating it would cost writes on every run), so
// names nobody uses any more are removed by hand.

func newLockCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "lock",
		Short: "Manage lock folders",
	}
	rm := &cobra.Command{
		Use:   "rm NAME...",
		Short: "Remove the folder of a lock nobody holds or waits for",
		Long: `Remove the folders of locks nobody uses any more, so that status and the
status page stop listing them. A lock that is held, waited for, or whose
previous holder is still stopping its job is left alone (exit 75); an
unknown name is exit 66. A contender that comes after the removal simply
creates the folder again: fencing tokens keep rising across it.`,
		Example: `  coordrun lock rm nightly-report
  coordrun lock rm --root /coordrun/locks old-backup-3f2a9c1e`,
		Args: cobra.MinimumNArgs(1),
		RunE: withClient(func(cmd *cobra.Command, args []string, s *clientSession) error {
			root := s.v.GetString("root")
			for _, name := range args {
				if err := removeLock(s.ctx, s.store(), root, name); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "removed lock %s\n", name)
			}
			return nil
		}),
	}
	addInspectFlags(rm, "/coordrun/locks", "znode folder holding every lock")
	cmd.AddCommand(rm)
	return cmd
}

// errNoSuchLock is a lock name with no folder under the root.
func errNoSuchLock(root, name string) error {
	return exitError{code: supervisor.ExitNotFound, err: fmt.Errorf("no such lock %q under %s (coordrun status lists them)", name, root)}
}

// checkLocksExist refuses names with no lock folder under root.
func checkLocksExist(ctx context.Context, st engine.Store, root string, names []string) error {
	for _, name := range names {
		// A folder this session may not read is there: the listing says
		// it is unreadable, and why.
		switch _, _, err := st.Get(ctx, path.Join(root, name)); {
		case errors.Is(err, engine.ErrNotFound):
			return errNoSuchLock(root, name)
		case err != nil && !errors.Is(err, engine.ErrNoAuth):
			return fmt.Errorf("lock %s: %w", name, err)
		}
	}
	return nil
}

// removeLock deletes the folder of one lock if nobody is in it. The
// delete is conditional on the folder's version as read after the look, and
// refused by a ZooKeeper store if a contender joined meanwhile (the folder
// is not empty then).
func removeLock(ctx context.Context, c engine.Conn, root, name string) error {
	dir := path.Join(root, name)
	q, err := c.List(ctx, dir)
	switch {
	case errors.Is(err, engine.ErrNotFound):
		return errNoSuchLock(root, name)
	case err != nil:
		return err
	}
	if why := lockInUse(q); why != "" {
		return exitError{code: supervisor.ExitNotAcquired, err: fmt.Errorf("lock %s is in use: %s; lock rm removes only a lock nobody holds or waits for", name, why)}
	}
	switch sq, ok, err := engine.ListSemaphore(ctx, c, dir); {
	case err != nil:
		return fmt.Errorf("lock %s: %w", name, err)
	case ok:
		if why := semaphoreInUse(sq); why != "" {
			return exitError{code: supervisor.ExitNotAcquired, err: fmt.Errorf("lock %s is in use: %s; lock rm removes only a lock nobody holds or waits for", name, why)}
		}
		if err := removeSemaphoreParts(ctx, c, dir); err != nil {
			return err
		}
	}
	_, st, err := c.Get(ctx, dir)
	if err != nil {
		return fmt.Errorf("lock %s: %w", name, err)
	}
	kids, err := c.Children(ctx, dir)
	if err != nil {
		return fmt.Errorf("lock %s: %w", name, err)
	}
	if len(kids) > 0 {
		return exitError{code: supervisor.ExitNotAcquired, err: fmt.Errorf("lock %s is in use: its folder holds %s", name, strings.Join(kids, ", "))}
	}
	switch err := c.Delete(ctx, dir, st.Version); {
	case errors.Is(err, wire.ErrNotEmpty), errors.Is(err, engine.ErrVersion):
		return errTakenMeanwhile(name)
	case errors.Is(err, engine.ErrNotFound):
		return nil // removed meanwhile by another lock rm
	case err != nil:
		return fmt.Errorf("remove lock %s: %w", name, err)
	}
	return nil
}

// lockInUse says who uses a lock, or "".
func lockInUse(q engine.Queue) string {
	var parts []string
	if len(q.Contenders) > 0 {
		h := q.Contenders[0].Info
		parts = append(parts, fmt.Sprintf("its holder is %s pid %d", h.Host, h.PID))
		if n := len(q.Contenders) - 1; n > 0 {
			parts = append(parts, fmt.Sprintf("%d waiting", n))
		}
	}
	if q.Stopping != nil {
		parts = append(parts, "a previous holder is stopping its job")
	}
	return strings.Join(parts, ", ")
}

// errTakenMeanwhile: a contender came while the lock was being removed.
func errTakenMeanwhile(name string) error {
	return exitError{code: supervisor.ExitNotAcquired, err: fmt.Errorf("lock %s was taken while being removed; left alone", name)}
}

// semaphoreInUse says who uses a semaphore (run --holders N), or "".
func semaphoreInUse(q engine.SemaphoreQueue) string {
	var parts []string
	if n := len(q.Holding); n > 0 {
		h := q.Holding[0].Info
		parts = append(parts, fmt.Sprintf("%d of its %d slots held (the first by %s pid %d)", n, q.Holders, h.Host, h.PID))
	}
	if n := len(q.Waiting); n > 0 {
		parts = append(parts, fmt.Sprintf("%d waiting", n))
	}
	if len(q.Stopping) > 0 {
		parts = append(parts, "a previous holder is stopping its job")
	}
	return strings.Join(parts, ", ")
}

// removeSemaphoreParts deletes the folders a semaphore keeps in dir (its
// slots, its markers' folder, its gate), each only while empty. A
// contender that comes meanwhile makes again what it needs (every part is
// created on demand), and its entry keeps dir from being removed.
func removeSemaphoreParts(ctx context.Context, c engine.Conn, dir string) error {
	kids, err := c.Children(ctx, dir)
	if err != nil {
		return err
	}
	// The gate last: a contender passes it before it uses the rest.
	gateLast := func(k string) int {
		if k == engine.SemaphoreGate {
			return 1
		}
		return 0
	}
	slices.SortFunc(kids, func(a, b string) int { return cmp.Compare(gateLast(a), gateLast(b)) })
	for _, k := range kids {
		if k != engine.SemaphoreGate && k != engine.SemaphoreHeld && !strings.HasPrefix(k, engine.SemaphoreSlotPrefix) {
			continue
		}
		switch err := c.Delete(ctx, path.Join(dir, k), engine.AnyVersion); {
		case errors.Is(err, wire.ErrNotEmpty):
			return errTakenMeanwhile(path.Base(dir))
		case err != nil && !errors.Is(err, engine.ErrNotFound):
			return fmt.Errorf("remove lock %s: %w", path.Base(dir), err)
		}
	}
	return nil
}
