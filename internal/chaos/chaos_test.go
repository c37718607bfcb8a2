package chaos

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble/tree"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/internal/testkit"
)

var testBin string

func TestMain(m *testing.M) {
	os.Exit(testkit.RunWithBinary(m, &testBin))
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestChaos runs the workload under faults and fails on any violation.
// Short by default; COORDRUN_CHAOS_DURATION (e.g. 5m), _MEMBERS (3 or 5)
// and _SEED make a longer or a repeated run.
func TestChaos(t *testing.T) {
	d := 20 * time.Second
	if s := os.Getenv("COORDRUN_CHAOS_DURATION"); s != "" {
		v, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("COORDRUN_CHAOS_DURATION: %v", err)
		}
		d = v
	}
	members := 3
	if s := os.Getenv("COORDRUN_CHAOS_MEMBERS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || (v != 3 && v != 5) {
			t.Fatalf("COORDRUN_CHAOS_MEMBERS: 3 or 5, not %q", s)
		}
		members = v
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("COORDRUN_CHAOS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("COORDRUN_CHAOS_SEED: %v", err)
		}
		seed = v
	}
	t.Logf("seed %d (COORDRUN_CHAOS_SEED=%d repeats the fault schedule), %s, %d members", seed, seed, d, members)
	dir, err := os.MkdirTemp("", "ensemble-chaos-run-")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), d+10*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Options{
		Cluster:  Config{Bin: testBin, Dir: dir, Members: members, Log: testLog{t}},
		Duration: d,
		Seed:     seed,
	})
	if err != nil {
		t.Fatalf("seed %d: %v (member logs in %s)", seed, err, dir)
	}
	t.Log("\n" + rep.Summary())
	if len(rep.Violations) > 0 {
		t.Fatalf("seed %d: %d violations; member logs and history kept in %s", seed, len(rep.Violations), dir)
	}
	if rep.OK == 0 {
		t.Fatalf("no operation succeeded")
	}
	os.RemoveAll(dir)
}

// The checkers must be able to fail: hand-made histories with one broken
// guarantee each.
func TestCheckersFail(t *testing.T) {
	k := "/chaos/reg/k0"
	t.Run("linearizability", func(t *testing.T) {
		h := &History{Ops: []Op{
			{Session: 1, Kind: OpSet, Key: k, Value: "a", Expect: -1, Call: 0, Return: 10, Outcome: OK, Version: 1},
			// Starts after the write returned, yet sees the old value.
			{Session: 2, Kind: OpSyncGet, Key: k, Call: 20, Return: 30, Outcome: OK, Got: initialVal, Version: 0},
		}}
		v, model, info := Linearizable(h, initialVal, time.Minute)
		if len(v) == 0 {
			t.Fatal("stale sync+read not reported")
		}
		hist, vis := keep(t.TempDir(), h, model, info, true)
		for _, f := range []string{hist, vis} {
			if st, err := os.Stat(f); err != nil || st.Size() == 0 {
				t.Errorf("kept file %q: %v", f, err)
			}
		}
		// The same read concurrent with the write is fine.
		h.Ops[1].Call = 5
		if v, _, _ := Linearizable(h, initialVal, time.Minute); len(v) != 0 {
			t.Fatalf("concurrent read reported: %v", v)
		}
	})
	t.Run("cas", func(t *testing.T) {
		h := &History{Ops: []Op{
			{Session: 1, Kind: OpCAS, Key: k, Value: "a", Expect: 0, Call: 0, Return: 10, Outcome: OK, Version: 1},
			{Session: 2, Kind: OpCAS, Key: k, Value: "b", Expect: 0, Call: 20, Return: 30, Outcome: OK, Version: 1},
		}}
		if v, _, _ := Linearizable(h, initialVal, time.Minute); len(v) == 0 {
			t.Fatal("two successful cas on the same version not reported")
		}
	})
	t.Run("unknown write may apply", func(t *testing.T) {
		h := &History{Ops: []Op{
			{Session: 1, Kind: OpSet, Key: k, Value: "a", Expect: -1, Call: 0, Return: -1, Outcome: Unknown},
			{Session: 2, Kind: OpSyncGet, Key: k, Call: 20, Return: 30, Outcome: OK, Got: "a", Version: 1},
			{Session: 2, Kind: OpSyncGet, Key: k, Call: 40, Return: 50, Outcome: OK, Got: initialVal, Version: 0},
		}}
		if v, _, _ := Linearizable(h, initialVal, time.Minute); len(v) == 0 {
			t.Fatal("a value that appeared and vanished not reported")
		}
		h.Ops = h.Ops[:2]
		if v, _, _ := Linearizable(h, initialVal, time.Minute); len(v) != 0 {
			t.Fatalf("ambiguous write seen by a read reported: %v", v)
		}
	})
	t.Run("session order", func(t *testing.T) {
		h := &History{Sessions: []SessionRecord{{N: 1, Frames: []Frame{
			{Seq: 0, Xid: 1, Zxid: 10, Order: true},
			{Seq: 1, Xid: 3, Zxid: 11, Order: false},
			{Seq: 2, Xid: 2, Zxid: 9, Order: true},
		}}}}
		v := SessionOrder(h)
		if len(v) != 2 {
			t.Fatalf("want an order and a zxid violation, got %v", v)
		}
	})
	t.Run("monotonic reads", func(t *testing.T) {
		h := &History{Ops: []Op{
			{Session: 1, Kind: OpSet, Key: k, Outcome: OK, Version: 5, Seq: 0},
			{Session: 1, Kind: OpGet, Key: k, Outcome: OK, Version: 4, Seq: 1},
			{Session: 2, Kind: OpGet, Key: k, Outcome: OK, Version: 3, Seq: 0}, // another session may lag
		}}
		if v := SessionOrder(h); len(v) != 1 {
			t.Fatalf("want one read-your-writes violation, got %v", v)
		}
	})
	t.Run("watches", func(t *testing.T) {
		h := &History{
			Arms: []Arm{
				{Session: 1, Path: k, Kind: "data", Seq: 0, ReplyZxid: 10},
				{Session: 2, Path: k, Kind: "data", Seq: 0, ReplyZxid: 10},
				{Session: 3, Path: k, Kind: "data", Seq: 5, ReplyZxid: 10},
			},
			Probes: []Probe{{Session: 1, Path: k, Seq: 3, Mzxid: 12}},
			Sessions: []SessionRecord{
				{N: 1, Survived: true}, // lost: the node changed, no event came
				{N: 2, Survived: true, Events: []WatchEvent{ // fired twice
					{Session: 2, Seq: 1, Type: wire.EventNodeDataChanged, Path: k, Zxid: 12},
					{Session: 2, Seq: 2, Type: wire.EventNodeDataChanged, Path: k, Zxid: 13},
				}},
				{N: 3, Events: []WatchEvent{ // before the reply that set it
					{Session: 3, Seq: 4, Type: wire.EventNodeDataChanged, Path: k, Zxid: 12},
				}},
			},
		}
		v := Watches(h)
		if len(v) != 3 {
			t.Fatalf("want lost, double and early watch violations, got %d: %v", len(v), v)
		}
		// Without the probe's change, session 1 lost nothing.
		h.Probes[0].Mzxid = 10
		if v := Watches(h); len(v) != 2 {
			t.Fatalf("unchanged node reported as a lost watch: %v", v)
		}
	})
	t.Run("durability", func(t *testing.T) {
		h := &History{Created: []string{"/chaos/dur/w0-0"}}
		if v := Durable(tree.New(), h); len(v) != 1 {
			t.Fatalf("missing create not reported: %v", v)
		}
	})
	t.Run("trees", func(t *testing.T) {
		if v := Trees([]int64{5, 5}, []*tree.Tree{tree.New(), tree.New()}); len(v) != 0 {
			t.Fatalf("equal trees reported: %v", v)
		}
		if v := Trees([]int64{5, 6}, []*tree.Tree{tree.New(), tree.New()}); len(v) != 1 {
			t.Fatalf("members at different zxids not reported: %v", v)
		}
	})
}

// The harness's faults must do what they say: an isolated leader is
// replaced (which needs the proxies to tell members apart by source
// address), and a client cut silences the member's client port.
func TestFaultsTakeEffect(t *testing.T) {
	dir, err := os.MkdirTemp("", "ensemble-chaos-faults-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Start(ctx, Config{Bin: testBin, Dir: dir, Log: testLog{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	old, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c.Partition([]int{old})
	testkit.WaitFor(t, 30*time.Second, fmt.Sprintf("isolated leader %d to be replaced", old+1), func() bool {
		ls := c.leaders()
		return len(ls) == 1 && ls[0] != old
	})
	c.Heal()
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}

	c.CutClients(0, true)
	if out, err := ask(c.ClientAddr(0), "ruok", 500*time.Millisecond); err == nil || out != "" {
		t.Fatalf("ruok through a cut proxy: %q, %v", out, err)
	}
	if out, err := ask(c.DirectClientAddr(0), "ruok", 5*time.Second); out != "imok" {
		t.Fatalf("ruok on the member's own port: %q, %v", out, err)
	}
	c.CutClients(0, false)
	if out, err := ask(c.ClientAddr(0), "ruok", 5*time.Second); out != "imok" {
		t.Fatalf("ruok after the cut healed: %q, %v", out, err)
	}

	// A rebuild (ensemble remove and add) and a snapshot, both of which
	// need the super user, go over the members' admin sockets.
	if err := c.Rebuild(ctx, 2); err != nil {
		t.Fatalf("rebuild: %v", err)
	}
	if _, tr, err := c.Snapshot(0); err != nil || tr.NodeCount() == 0 {
		t.Fatalf("snapshot: %v", err)
	}
}
