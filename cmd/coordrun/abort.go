package main

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"syscall"
	"time"
)

// A member that misses its watchdog pings for WatchdogSec is sent SIGABRT
// by systemd (WatchdogSignal's default). Go's own answer to SIGABRT is a
// dump of every goroutine on stderr, hundreds of lines in the journal
// that bury the reason, while the stacks matter only to whoever debugs
// the hang. So the server takes SIGABRT itself: one ERROR line in the
// journal with the reason and the watchdog's last word, the stacks in a
// file in the data dir for a bug report, then exit 134 (128+SIGABRT, what
// a shell reports for a process killed by it) at once, without the
// orderly shutdown that a hung member may never finish.
//
// A runtime wedged so badly that this handler cannot run is left to
// systemd's SIGKILL after TimeoutAbortSec (the unit sets it).

// abortStacksKept is how many stack files of earlier aborts stay in the
// data dir: enough to compare a few, never filling the disk.
const abortStacksKept = 3

// handleAbort takes SIGABRT for the rest of the process's life. dir is the
// data dir; why says what the watchdog last saw.
func handleAbort(log *slog.Logger, dir string, why func() []any) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGABRT)
	go func() {
		<-ch
		file, err := saveStacks(dir, time.Now())
		attrs := append([]any{"stacks", file}, why()...)
		if err != nil {
			// Better in the journal than nowhere.
			attrs = []any{"stacks", "below on stderr (saving them failed: " + err.Error() + ")"}
			defer pprof.Lookup("goroutine").WriteTo(os.Stderr, 2)
		}
		log.Error("aborting on SIGABRT, which systemd sends when the member missed its watchdog pings for WatchdogSec", attrs...)
		exitAbort()
	}()
}

// saveStacks writes every goroutine's stack to dir/abort-TIME.stacks and
// removes all but the newest abortStacksKept of them.
func saveStacks(dir string, now time.Time) (string, error) {
	file := filepath.Join(dir, "abort-"+now.UTC().Format("20060102T150405.000Z")+".stacks")
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		return "", err
	}
	werr := pprof.Lookup("goroutine").WriteTo(f, 2)
	if err := f.Close(); werr == nil {
		werr = err
	}
	if werr != nil {
		return "", fmt.Errorf("write %s: %w", file, werr)
	}
	old, _ := filepath.Glob(filepath.Join(dir, "abort-*.stacks"))
	slices.Sort(old) // the names sort as times
	for len(old) > abortStacksKept {
		os.Remove(old[0])
		old = old[1:]
	}
	return file, nil
}
