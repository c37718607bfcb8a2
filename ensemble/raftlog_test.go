package ensemble

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// records is a slog handler that keeps every record at or above min.
type records struct {
	mu   sync.Mutex
	min  slog.Level
	recs []slog.Record
}

func (h *records) Enabled(_ context.Context, l slog.Level) bool { return l >= h.min }
func (h *records) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}
func (h *records) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *records) WithGroup(string) slog.Handler      { return h }

func (h *records) all() []slog.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]slog.Record(nil), h.recs...)
}

// matching is the records whose message contains s.
func (h *records) matching(s string) []slog.Record {
	var out []slog.Record
	for _, r := range h.all() {
		if strings.Contains(r.Message, s) {
			out = append(out, r)
		}
	}
	return out
}

func attr(r slog.Record, key string) string {
	v := ""
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value.String()
			return false
		}
		return true
	})
	return v
}

func TestRaftLogLevels(t *testing.T) {
	h := &records{min: slog.LevelDebug - 4}
	l := newRaftLog(slog.New(h))
	l.Trace("t")
	l.Debug("d")
	l.Info("i")
	l.Warn("w")
	l.Error("e", "error", errors.New("boom"))
	l.Log(hclog.NoLevel, "n")
	l.With("node", "x").Named("net").Error("named", "cmd", hclog.Fmt("%d-%s", 7, "a"))
	l.StandardWriter(nil).Write([]byte("[ERR] std error\n"))
	l.StandardLogger(nil).Print("[WARN] std warning")

	want := []struct {
		msg   string
		level slog.Level
	}{
		{"raft: t", slog.LevelDebug - 4},
		{"raft: d", slog.LevelDebug},
		{"raft: i", slog.LevelInfo},
		{"raft: w", slog.LevelWarn},
		{"raft: e", slog.LevelError},
		{"raft: n", slog.LevelInfo},
		{"raft.net: named", slog.LevelError},
		{"raft: std error", slog.LevelError},
		{"raft: std warning", slog.LevelWarn},
	}
	got := h.all()
	if len(got) != len(want) {
		t.Fatalf("%d records, want %d: %v", len(got), len(want), got)
	}
	for i, w := range want {
		if got[i].Message != w.msg || got[i].Level != w.level {
			t.Errorf("record %d: %s %q, want %s %q", i, got[i].Level, got[i].Message, w.level, w.msg)
		}
	}
	if v := attr(got[4], "error"); v != "boom" {
		t.Errorf("error attribute %q", v)
	}
	if n, c := attr(got[6], "node"), attr(got[6], "cmd"); n != "x" || c != "7-a" {
		t.Errorf("implied and formatted attributes: node=%q cmd=%q", n, c)
	}

	// The handler's level decides, and raft can ask it.
	h2 := &records{min: slog.LevelWarn}
	l2 := newRaftLog(slog.New(h2))
	l2.Info("hidden")
	l2.Warn("shown")
	if got := h2.all(); len(got) != 1 || got[0].Message != "raft: shown" {
		t.Errorf("at WARN: %v", got)
	}
	if l2.IsInfo() || !l2.IsWarn() || l2.GetLevel() != hclog.Warn {
		t.Errorf("IsInfo %v IsWarn %v GetLevel %v at a WARN handler", l2.IsInfo(), l2.IsWarn(), l2.GetLevel())
	}
}

func TestRaftLogNoise(t *testing.T) {
	for _, c := range []struct {
		msg  string
		in   slog.Level
		args []any
		want slog.Level
	}{
		{"failed to make requestVote RPC", slog.LevelError, []any{"target", "x"}, slog.LevelDebug},
		{"failed to heartbeat to", slog.LevelError, nil, slog.LevelDebug},
		{"failed to contact", slog.LevelWarn, nil, slog.LevelDebug},
		{"Election timeout reached, restarting election", slog.LevelWarn, nil, slog.LevelDebug},
		{"entering candidate state", slog.LevelInfo, nil, slog.LevelDebug},
		{"heartbeat timeout reached, starting election", slog.LevelWarn, []any{"last-leader-addr", "", "last-leader-id", ""}, slog.LevelInfo},
		{"heartbeat timeout reached, starting election", slog.LevelWarn, []any{"last-leader-addr", "a:1", "last-leader-id", "2"}, slog.LevelWarn},
		{"failed to contact quorum of nodes, stepping down", slog.LevelWarn, nil, slog.LevelWarn},
		{"failed to append to logs", slog.LevelError, nil, slog.LevelError},
	} {
		if got := raftNoise(c.msg, c.in, c.args); got != c.want {
			t.Errorf("%q %v: %v, want %v", c.msg, c.args, got, c.want)
		}
	}
}

// A lone member of a new three-member ensemble logs one line saying
// which peers it waits for, not one per election round; once a second
// member comes up, one line says a leader is known, and the leader one
// that the third peer is unreachable.
func TestLoneMemberWaitingLines(t *testing.T) {
	addrs := testkit.FreeAddrs(t, "127.0.0.1", 3)
	peers := []Peer{{ID: "1", Addr: addrs[0]}, {ID: "2", Addr: addrs[1]}, {ID: "3", Addr: addrs[2]}}
	start := func(id string, h *records) *Member {
		t.Helper()
		i := int(id[0] - '1')
		cfg := Config{ID: id, DataDir: t.TempDir(), ClientAddr: "127.0.0.1:0", PeerAddr: peers[i].Addr, Peers: peers,
			HeartbeatTimeout: 100 * time.Millisecond, ElectionTimeout: 100 * time.Millisecond, Logger: slog.New(h)}
		m, err := Start(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	h1 := &records{min: slog.LevelDebug}
	m1 := start("1", h1)

	// Many election rounds (raft's own per-round lines, at DEBUG now).
	testkit.WaitFor(t, 30*time.Second, "ten election rounds", func() bool {
		return len(h1.matching("Election timeout reached")) >= 10
	})
	if w := m1.Waiting(); w != "waiting for peers 2,3 (unreachable)" {
		t.Errorf("Waiting() = %q", w)
	}
	var above []string
	for _, r := range h1.all() {
		if r.Level >= slog.LevelInfo {
			above = append(above, fmt.Sprintf("%s %s", r.Level, r.Message))
		}
	}
	waits := 0
	for _, s := range above {
		if strings.HasPrefix(s, "WARN") || strings.HasPrefix(s, "ERROR") {
			t.Errorf("a lone member logged %s", s)
		}
		if strings.Contains(s, "waiting for peers") {
			waits++
		}
	}
	// The first round may see one peer fail before the other.
	if last := h1.matching("waiting for peers"); waits == 0 || waits > 2 || last[len(last)-1].Message != "waiting for peers 2,3 (unreachable)" {
		t.Errorf("%d waiting lines over ten rounds, want 1 (or 2 in the first round):\n%s", waits, strings.Join(above, "\n"))
	}
	if len(above) > 12 {
		t.Errorf("%d lines at INFO or above over ten rounds:\n%s", len(above), strings.Join(above, "\n"))
	}
	votes := h1.matching("failed to make requestVote RPC")
	if len(votes) == 0 || votes[0].Level != slog.LevelDebug {
		t.Errorf("raft's failed votes: %v", votes)
	}

	// DEBUG as for the first: either may lead, and the leader's failed
	// heartbeats to peer 3 are counted below at raft's demoted level.
	h2 := &records{min: slog.LevelDebug}
	m2 := start("2", h2)
	testkit.WaitFor(t, 30*time.Second, "both members knowing a leader", func() bool {
		return m1.Waiting() == "" && m2.Waiting() == "" && len(h1.matching("leader known")) == 1
	})
	leader, hl := m1, h1
	if m2.IsLeader() {
		leader, hl = m2, h2
	}
	testkit.WaitFor(t, 10*time.Second, "the leader reporting peer 3", func() bool {
		return len(hl.matching("peer 3 unreachable")) > 0
	})
	// Heartbeats to peer 3 keep failing: still one line.
	rounds := len(hl.matching("failed to heartbeat"))
	testkit.WaitFor(t, 10*time.Second, "more heartbeats to peer 3", func() bool {
		return !leader.IsLeader() || len(hl.matching("failed to heartbeat"))+len(hl.matching("failed to appendEntries")) > rounds+5
	})
	if n := len(hl.matching("peer 3 unreachable")); n != 1 && leader.IsLeader() {
		t.Errorf("%d lines about peer 3", n)
	}
}

func TestPeerReason(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}
	if r := peerReason(fmt.Errorf("wrapped: %w", refused)); r != "unreachable" {
		t.Errorf("dial error: %q", r)
	}
	if r := peerReason(errors.New("tls: bad certificate")); r != "tls: bad certificate" {
		t.Errorf("other error: %q", r)
	}
	h := newPeerHealth(slog.New(slog.DiscardHandler))
	h.note(raft.ServerID("3"), refused)
	h.note(raft.ServerID("2"), refused)
	h.note(raft.ServerID("4"), errors.New("tls: bad certificate"))
	h.note(raft.ServerID("5"), nil)
	if got := waitingText(h.down()); got != "waiting for peers 2,3 (unreachable), 4 (tls: bad certificate)" {
		t.Errorf("waiting text %q", got)
	}
}
