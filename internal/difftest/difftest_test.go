package difftest

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/internal/testkit/ensembletest"
	"github.com/coordrun/coordrun/internal/testkit/zookeeper"
)

var (
	flagSeqs    = flag.Int("difftest.seqs", 0, "sequences to run; 0 runs the short seeded pass")
	flagSeed    = flag.Uint64("difftest.seed", 1, "first seed of a long run")
	flagOut     = flag.String("difftest.out", "", "directory for findings (default: the test's temporary directory)")
	flagMembers = flag.Int("difftest.members", 1, "1: a standalone ZooKeeper and one coordrun member; 3: three of each, sessions on different members")
)

// shortSeeds are the sequences make test runs, few enough to stay within
// seconds: a plain range, so that any difference found there is a
// finding, as in a long run.
var shortSeeds = seedRange(1, 40)

func seedRange(from, n uint64) []uint64 {
	var s []uint64
	for i := uint64(0); i < n; i++ {
		s = append(s, from+i)
	}
	return s
}

// seqLen spreads sequence lengths over 20 to 60 ops.
func seqLen(seed uint64) int { return 20 + int(seed%41) }

const sessions = 3

// zooKeeper is the standalone server the tests share; every sequence
// runs under a root of its own, so they need no fresh one.
var zooKeeper = zookeeper.Shared{Prefix: "coordrun-difftest-zk-", FourLetter: client.FourLetter}

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	zooKeeper.Stop()
	os.Exit(code)
}

func startZooKeeper(t *testing.T) string {
	t.Helper()
	return zooKeeper.Addr(t)
}

func startCoordrun(t *testing.T, members int) []string {
	t.Helper()
	// Every four-letter word on, as the ZooKeeper beside it has them
	// (4lw.commands.whitelist=*).
	return ensembletest.Start(t, members, ensembletest.FourLetterWords("*")).Servers()
}

// TestDifferential runs seeded sequences against ZooKeeper 3.8 and a
// coordrun member and fails on every difference the known table does not
// explain, each shrunk and written to a file with both traces.
func TestDifferential(t *testing.T) {
	if testing.Short() && *flagSeqs == 0 {
		t.Skip("starts ZooKeeper")
	}
	tester := &Tester{Sessions: sessions}
	switch *flagMembers {
	case 1:
		tester.Ref = Target{Name: "zookeeper-3.8", Addrs: []string{startZooKeeper(t)}}
		tester.Test = Target{Name: "coordrun", Addrs: startCoordrun(t, 1)}
	case 3:
		tester.Ref = Target{Name: "zookeeper-3.8 (3 members)", Addrs: startZooKeeperQuorum(t), Sync: true}
		tester.Test = Target{Name: "coordrun (3 members)", Addrs: startCoordrun(t, 3), Sync: true}
	default:
		t.Fatalf("-difftest.members=%d: 1 or 3", *flagMembers)
	}
	seeds := shortSeeds
	if *flagSeqs > 0 {
		seeds = seedRange(*flagSeed, uint64(*flagSeqs))
	}
	out := *flagOut
	if out == "" {
		out = t.TempDir()
	} else if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var ops, repeats int
	known := map[string]int{}
	var passed []uint64
	seen := map[string]bool{}
	for _, seed := range seeds {
		seq := Generate(seed, seqLen(seed), sessions)
		ops += len(seq)
		f, err := tester.Check(seq)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if f == nil || len(f.Unknown()) == 0 {
			passed = append(passed, seed)
		}
		if f == nil {
			continue
		}
		for _, d := range f.Diffs {
			if d.Known != nil {
				known[d.Known.ID]++
			}
		}
		for _, d := range f.Unknown() {
			// The same difference recurs in many sequences; shrink and
			// report it once.
			sig := d.Signature()
			if seen[sig] {
				repeats++
				continue
			}
			seen[sig] = true
			small, sd, err := tester.Shrink(seq, sig)
			if errors.Is(err, ErrNotRecurring) {
				p, _ := f.Write(&d, out, fmt.Sprintf("diff-%03d-seed-%d-flaky", len(seen), seed))
				report := t.Errorf
				if strings.Contains(d.Ref, "no reply") && !strings.Contains(d.Test, "no reply") {
					// ZooKeeper left a request unanswered past the
					// tester's wait, once: a loaded machine, not a
					// difference of coordrun's.
					report = t.Logf
				}
				report("seed %d: ZooKeeper and coordrun differed once (%s) but not on re-runs; traces in %s\n%s",
					seed, sig, p, f.Report(&d))
				continue
			}
			if err != nil {
				t.Fatalf("seed %d: shrinking: %v", seed, err)
			}
			p, err := small.Write(sd, out, fmt.Sprintf("diff-%03d-seed-%d", len(seen), seed))
			if err != nil {
				t.Fatal(err)
			}
			t.Errorf("seed %d: ZooKeeper and coordrun differ (%s); shrunk from %d to %d ops, traces in %s\n%s",
				seed, sig, len(seq), len(small.Ops), p, small.Report(sd))
		}
	}
	t.Logf("%d sequences, %d ops in %v: %d distinct differences (met %d more times), known ones met: %v",
		len(seeds), ops, time.Since(start).Round(time.Millisecond), len(seen), repeats, known)
	t.Logf("seeds without an unexplained difference: %v", passed)
}

// TestTesterBites shows that the tester notices a wrong reply field and
// a lost watch event, and shrinks each to a few ops. Both targets are
// coordrun members; one of them is seen through a client that alters
// what it reads. (Two members rather than one, so that neither sees the
// other's roots under /.)
func TestTesterBites(t *testing.T) {
	ref, addrs := startCoordrun(t, 1), startCoordrun(t, 1)
	cases := []struct {
		name string
		tg   Target
	}{
		{"cversion off by one", Target{TamperReply: func(o Op, r wire.Record) {
			if g, ok := r.(*wire.GetDataResponse); ok && g.Stat.NumChildren > 0 {
				g.Stat.Cversion++
			}
		}}},
		{"NodeDeleted lost", Target{DropEvent: func(ev wire.WatcherEvent) bool {
			return ev.Type == wire.EventNodeDeleted
		}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.tg.Name, c.tg.Addrs = "coordrun (altered)", addrs
			tester := &Tester{Ref: Target{Name: "coordrun", Addrs: ref}, Test: c.tg, Sessions: sessions, Known: []Known{}}
			var f *Finding
			for seed := uint64(1); seed <= 200 && f == nil; seed++ {
				var err error
				if f, err = tester.Check(Generate(seed, seqLen(seed), sessions)); err != nil {
					t.Fatal(err)
				}
			}
			if f == nil {
				t.Fatal("no difference found in 200 sequences")
			}
			small, sd, err := tester.Shrink(f.Ops, f.Diffs[0].Signature())
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("shrunk from %d to %d ops:\n%s", len(f.Ops), len(small.Ops), small.Report(sd))
			if len(small.Ops) > 3 {
				t.Errorf("shrunk to %d ops, want at most 3", len(small.Ops))
			}
		})
	}
}

// TestKnownEntriesMatch checks entries of the table against the real
// differences: each sequence, run against ZooKeeper 3.8 and coordrun,
// differs once, and the entry named explains it.
func TestKnownEntriesMatch(t *testing.T) {
	tester := &Tester{Ref: Target{Name: "zookeeper-3.8", Addrs: []string{startZooKeeper(t)}},
		Test: Target{Name: "coordrun", Addrs: startCoordrun(t, 1)}, Sessions: 2}
	for _, c := range []struct {
		id  string
		seq []Op
	}{
		// ZooKeeper keeps an emptied container until its sweep, coordrun
		// deletes it at once: seen in its stat, and in its parent's.
		{"container-deleted-at-once", []Op{
			{Code: wire.OpCreateContainer, Path: "{R}/a", Flags: wire.FlagContainer, ACL: "open"},
			{Code: wire.OpCreate, Path: "{R}/a/x", ACL: "open"},
			{Code: wire.OpDelete, Path: "{R}/a/x", Version: -1},
			{Code: wire.OpExists, Path: "{R}/a"},
		}},
		{"container-deleted-at-once", []Op{
			{Code: wire.OpCreate, Path: "{S}", Flags: wire.FlagContainer, ACL: "open"},
			{S: 1, Code: wire.OpCreate, Path: "{S}/x", Flags: wire.FlagEphemeral, ACL: "open"},
			{Code: wire.OpDelete, Path: "{S}/x", Version: 0},
			{S: 1, Code: wire.OpExists, Path: "{R}"},
		}},
		{"check-watches-of-others", []Op{
			{S: 1, Code: wire.OpAddWatch, Path: "{R}/b", Mode: wire.AddWatchPersistentRecursive},
			{Code: wire.OpCheckWatches, Path: "{R}/b", Mode: wire.WatcherAny},
		}},
		{"check-watches-of-others", []Op{
			{S: 1, Code: wire.OpAddWatch, Path: "{R}/b", Mode: wire.AddWatchPersistentRecursive},
			{S: 1, Code: wire.OpCheckWatches, Path: "{N}/a", Mode: wire.WatcherAny},
		}},
		{"remove-persistent-as-data", []Op{
			{Code: wire.OpAddWatch, Path: "{R}/b/x", Mode: wire.AddWatchPersistentRecursive},
			{Code: wire.OpRemoveWatches, Path: "{R}/b/x", Mode: wire.WatcherData},
		}},
	} {
		f, err := tester.Check(c.seq)
		if err != nil {
			t.Fatal(err)
		}
		if f == nil || len(f.Diffs) != 1 || f.Diffs[0].Known == nil || f.Diffs[0].Known.ID != c.id {
			var diffs []string
			if f != nil {
				for _, d := range f.Diffs {
					diffs = append(diffs, fmt.Sprintf("at %d: %s | %s (known %v)", d.At, d.Ref, d.Test, d.Known != nil))
				}
			}
			t.Errorf("%s: want one difference, the entry's; got %q", c.id, diffs)
		}
	}
}

// The watch entries explain their own cases only.
func TestKnownWatchMatchers(t *testing.T) {
	check := Op{S: 0, Code: wire.OpCheckWatches, Path: "{R}/b", Mode: wire.WatcherAny}
	remove := Op{S: 0, Code: wire.OpRemoveWatches, Path: "{R}/b", Mode: wire.WatcherData}
	recursive := func(s int, p string) Op {
		return Op{S: s, Code: wire.OpAddWatch, Path: p, Mode: wire.AddWatchPersistentRecursive}
	}
	for _, c := range []struct {
		name  string
		match func(Diff) bool
		d     Diff
		want  bool
	}{
		{"another session's watch", checksOthersWatch, Diff{Ops: []Op{recursive(1, "{R}/b"), check}, At: 1, Ref: "s# -> OK", Test: "s# -> no such watcher"}, true},
		{"another session's watch above", checksOthersWatch, Diff{Ops: []Op{recursive(1, "{R}"), check}, At: 1, Ref: "s# -> OK", Test: "s# -> no such watcher"}, true},
		{"no watch at all", checksOthersWatch, Diff{Ops: []Op{check}, At: 0, Ref: "s# -> OK", Test: "s# -> no such watcher"}, false},
		{"a watch elsewhere", checksOthersWatch, Diff{Ops: []Op{recursive(1, "{R}/a"), check}, At: 1, Ref: "s# -> OK", Test: "s# -> no such watcher"}, false},
		{"coordrun says OK", checksOthersWatch, Diff{Ops: []Op{recursive(1, "{R}/b"), check}, At: 1, Ref: "s# -> no such watcher", Test: "s# -> OK"}, false},
		{"relative path, recursive watch", checksOthersWatch, Diff{Ops: []Op{recursive(1, "{R}/b"), {Code: wire.OpCheckWatches, Path: "{N}/a"}}, At: 1, Ref: "s# -> marshalling error", Test: "s# -> no such watcher"}, true},
		{"absolute path, marshalling error", checksOthersWatch, Diff{Ops: []Op{recursive(1, "{R}/b"), check}, At: 1, Ref: "s# -> marshalling error", Test: "s# -> no such watcher"}, false},
		{"own recursive watch", removesPersistentAsData, Diff{Ops: []Op{recursive(0, "{R}/b"), remove}, At: 1, Ref: "s# -> OK", Test: "s# -> no such watcher"}, true},
		{"another session's recursive watch", removesPersistentAsData, Diff{Ops: []Op{recursive(1, "{R}/b"), remove}, At: 1, Ref: "s# -> OK", Test: "s# -> no such watcher"}, false},
		{"own one-shot watch", removesPersistentAsData, Diff{Ops: []Op{{Code: wire.OpGetData, Path: "{R}/b", Watch: true}, remove}, At: 1, Ref: "s# -> OK", Test: "s# -> no such watcher"}, false},
		{"type any", removesPersistentAsData, Diff{Ops: []Op{recursive(0, "{R}/b"), {Code: wire.OpRemoveWatches, Path: "{R}/b", Mode: wire.WatcherAny}}, At: 1, Ref: "s# -> OK", Test: "s# -> no such watcher"}, false},
	} {
		if got := c.match(c.d); got != c.want {
			t.Errorf("%s: matched %v, want %v", c.name, got, c.want)
		}
	}
}

// TestKnownNotesInREADME keeps the known-differences table and the
// Compatibility notes (docs/compatibility.md) in step: every entry quotes
// that section.
func TestKnownNotesInREADME(t *testing.T) {
	b, err := os.ReadFile("../../docs/compatibility.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "# Compatibility notes\n")
	if !ok {
		t.Fatal("docs/compatibility.md has no Compatibility notes section")
	}
	if end := strings.Index(section, "\n# "); end >= 0 {
		section = section[:end]
	}
	section = strings.Join(strings.Fields(section), " ")
	ids := map[string]bool{}
	for _, k := range KnownDifferences {
		if k.ID == "" || k.Reason == "" || k.Match == nil || ids[k.ID] {
			t.Errorf("entry %q: needs a unique id, a reason and a matcher", k.ID)
		}
		ids[k.ID] = true
		if note := strings.Join(strings.Fields(k.Note), " "); note == "" || !strings.Contains(section, note) {
			t.Errorf("entry %s: note %q is not in the Compatibility notes (docs/compatibility.md)", k.ID, k.Note)
		}
	}
}

func TestGenerateIsDeterministic(t *testing.T) {
	a, b := Format(Generate(7, 60, 3)), Format(Generate(7, 60, 3))
	if a != b {
		t.Fatalf("same seed, different sequences:\n%s\n%s", a, b)
	}
	if Format(Generate(8, 60, 3)) == a {
		t.Fatal("different seeds, same sequence")
	}
}

func TestRankZxids(t *testing.T) {
	lines := rankZxids([]Line{{Text: "a " + zmark(900) + " " + zmark(0)}, {Text: "b " + zmark(5) + " " + zmark(900) + " " + zmark(950) + " " + zmark(901)}})
	if lines[0].Text != "a z1(<) 0" || lines[1].Text != "b z2(<) z1 z3(>z1) z4(>z1)" {
		t.Fatalf("ranked: %q %q", lines[0].Text, lines[1].Text)
	}
}

// The watch-mode entry explains only sequences where one session mixed
// watch kinds on one path.
func TestMixesWatchModes(t *testing.T) {
	mixed := []Op{
		{S: 1, Code: wire.OpAddWatch, Path: "/r", Mode: wire.AddWatchPersistent},
		{S: 1, Code: wire.OpAddWatch, Path: "/r", Mode: wire.AddWatchPersistentRecursive},
		{S: 2, Code: wire.OpCreate, Path: "/r/a"},
	}
	if !mixesWatchModes(Diff{Ops: mixed, At: 2}) {
		t.Error("persistent and recursive on one path by one session not matched")
	}
	oneShot := []Op{
		{S: 1, Code: wire.OpAddWatch, Path: "/r", Mode: wire.AddWatchPersistentRecursive},
		{S: 1, Code: wire.OpGetData, Path: "/r", Watch: true},
		{S: 2, Code: wire.OpCreate, Path: "/r/c"},
	}
	if !mixesWatchModes(Diff{Ops: oneShot, At: 2}) {
		t.Error("a one-shot watch after a recursive one not matched")
	}
	for name, ops := range map[string][]Op{
		"two sessions": {{S: 1, Code: wire.OpAddWatch, Path: "/r", Mode: wire.AddWatchPersistent}, {S: 2, Code: wire.OpAddWatch, Path: "/r", Mode: wire.AddWatchPersistentRecursive}, {S: 3, Code: wire.OpCreate, Path: "/r/a"}},
		"two paths":    {{S: 1, Code: wire.OpAddWatch, Path: "/r", Mode: wire.AddWatchPersistent}, {S: 1, Code: wire.OpAddWatch, Path: "/q", Mode: wire.AddWatchPersistentRecursive}, {S: 2, Code: wire.OpCreate, Path: "/r/a"}},
		"one-shots":    {{S: 1, Code: wire.OpGetData, Path: "/r", Watch: true}, {S: 1, Code: wire.OpGetChildren, Path: "/r", Watch: true}, {S: 2, Code: wire.OpCreate, Path: "/r/a"}},
		"after the op": {{S: 2, Code: wire.OpCreate, Path: "/r/a"}, {S: 1, Code: wire.OpAddWatch, Path: "/r", Mode: wire.AddWatchPersistent}, {S: 1, Code: wire.OpAddWatch, Path: "/r", Mode: wire.AddWatchPersistentRecursive}},
	} {
		if mixesWatchModes(Diff{Ops: ops, At: 0}) && name == "after the op" || name != "after the op" && mixesWatchModes(Diff{Ops: ops, At: 2}) {
			t.Errorf("%s: matched", name)
		}
	}
}
