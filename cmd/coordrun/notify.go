package main

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/coordrun/coordrun/ensemble"
	"github.com/coreos/go-systemd/v22/daemon"
)

// systemd integration of `coordrun server` for Type=notify units: READY=1
// once the member knows a leader (so units ordered After= it start against
// a working ensemble), STOPPING=1 on shutdown, and watchdog pings while the
// member passes its liveness check. Without NOTIFY_SOCKET (not started by
// systemd) every message is dropped; without WATCHDOG_USEC there are no
// pings.
//
// A member of a multi-member ensemble is not ready until a quorum is up,
// so its unit's TimeoutStartSec must allow for the other members starting.

// sdNotifier runs the notifications of one server process.
type sdNotifier struct {
	log    *slog.Logger
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	interval time.Duration // the watchdog's, 0 when off
	lastPing time.Time     // the latest WATCHDOG=1
	pingGap  time.Duration // between the latest two; long after a freeze
	lastErr  error         // the latest failed liveness check's, nil after a pass
}

// lastWord is what the watchdog saw last, as log attributes: how long ago
// it pinged, the gap before that ping, and the liveness check's latest
// error. A process frozen (SIGSTOP, swap) and resumed by systemd's abort
// may ping once more before the abort is handled: then the gap, not the
// last ping's age, shows the freeze.
func (n *sdNotifier) lastWord() []any {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.interval == 0 {
		return []any{"watchdog", "off"}
	}
	attrs := []any{"watchdog_interval", n.interval}
	if n.lastPing.IsZero() {
		attrs = append(attrs, "last_ping", "never")
	} else {
		attrs = append(attrs, "last_ping_ago", time.Since(n.lastPing).Round(time.Millisecond))
		if n.pingGap > 0 {
			attrs = append(attrs, "gap_before_last_ping", n.pingGap.Round(time.Millisecond))
		}
	}
	if n.lastErr != nil {
		attrs = append(attrs, "liveness_err", n.lastErr)
	}
	return attrs
}

// startSdNotify begins waiting for readiness and, if systemd asks for it,
// pinging the watchdog. Call stopping when the server begins to shut down.
func startSdNotify(ctx context.Context, m *ensemble.Member, log *slog.Logger) *sdNotifier {
	ctx, cancel := context.WithCancel(ctx)
	n := &sdNotifier{log: log, cancel: cancel}
	n.wg.Add(2)
	go func() {
		defer n.wg.Done()
		n.waitReady(ctx, m)
	}()
	go func() {
		defer n.wg.Done()
		n.watchdog(ctx, m)
	}()
	return n
}

// waitReady keeps STATUS= on what the member waits for ("waiting for
// peers 2,3 (unreachable)", see systemctl status) until it knows a
// leader, then sends READY=1.
func (n *sdNotifier) waitReady(ctx context.Context, m *ensemble.Member) {
	status := "waiting for a leader"
	n.notify("STATUS=" + status)
	for {
		wctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
		err := m.WaitReady(wctx)
		cancel()
		if err == nil {
			n.notify("READY=1\nSTATUS=serving clients on " + m.ClientAddr())
			return
		}
		if ctx.Err() != nil {
			return
		}
		if w := m.Waiting(); w != "" && w != status {
			status = w
			n.notify("STATUS=" + status)
		}
	}
}

// stopping ends readiness waiting and watchdog pings, then tells systemd
// the service is stopping; no READY=1 or WATCHDOG=1 follows it.
func (n *sdNotifier) stopping() {
	n.cancel()
	n.wg.Wait()
	n.notify("STOPPING=1\nSTATUS=shutting down")
}

func (n *sdNotifier) notify(state string) {
	if _, err := daemon.SdNotify(false, state); err != nil {
		first, _, _ := strings.Cut(state, "\n")
		n.log.Warn("systemd notify failed", "state", first, "err", err)
	}
}

// watchdog sends WATCHDOG=1 every half interval while the member is live
// (its client port answers and its state machine is not wedged). A failed
// check skips the ping; after a whole interval without one systemd
// restarts the service (WatchdogSec, Restart=).
func (n *sdNotifier) watchdog(ctx context.Context, m *ensemble.Member) {
	interval, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		n.log.Warn("systemd watchdog setting ignored", "err", err)
		return
	}
	if interval <= 0 {
		return
	}
	n.log.Info("systemd watchdog enabled", "interval", interval)
	n.mu.Lock()
	n.interval = interval
	n.mu.Unlock()
	tick := time.NewTicker(interval / 2)
	defer tick.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, interval/4)
		err := m.Live(cctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		n.mu.Lock()
		n.lastErr = err
		if err == nil {
			now := time.Now()
			if !n.lastPing.IsZero() {
				n.pingGap = now.Sub(n.lastPing)
			}
			n.lastPing = now
		}
		n.mu.Unlock()
		if err != nil {
			n.log.Warn("liveness check failed; withholding the watchdog ping", "err", err)
		} else {
			n.notify("WATCHDOG=1")
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
