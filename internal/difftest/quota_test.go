package difftest

import (
	"testing"

	"github.com/coordrun/coordrun/ensemble"
	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/internal/testkit/ensembletest"
	"github.com/coordrun/coordrun/internal/testkit/zookeeper"
)

func text(s string) Data { return Data{Kind: DataText, Text: s} }

// What zkCli 3.8's setquota writes: -N 3 -B 12 as hard limits, and the
// zeroed stats node the server then fills in.
const (
	quotaHard  = "count=-1,bytes=-1=;byteHardLimit=12;countHardLimit=3"
	quotaSoft  = "count=2,bytes=4=;byteHardLimit=-1;countHardLimit=-1"
	quotaStats = "count=0,bytes=0"
)

// setQuotaOps are the writes of zkCli's setquota on {R}+sub, its parents
// under /zookeeper/quota made first.
func setQuotaOps(sub, limits string) []Op {
	var ops []Op
	p := "/zookeeper/quota{R}"
	ops = append(ops, Op{S: 0, Code: wire.OpCreate, Path: p, Flags: wire.FlagPersistent, ACL: "open"})
	for _, name := range splitSub(sub) {
		p += "/" + name
		ops = append(ops, Op{S: 0, Code: wire.OpCreate, Path: p, Flags: wire.FlagPersistent, ACL: "open"})
	}
	return append(ops,
		Op{S: 0, Code: wire.OpCreate, Path: p + "/zookeeper_limits", Data: text(limits), Flags: wire.FlagPersistent, ACL: "open"},
		Op{S: 0, Code: wire.OpCreate, Path: p + "/zookeeper_stats", Data: text(quotaStats), Flags: wire.FlagPersistent, ACL: "open"})
}

func splitSub(sub string) []string {
	var out []string
	for _, s := range []byte(sub) {
		if s == '/' {
			out = append(out, "")
			continue
		}
		out[len(out)-1] += string(s)
	}
	return out
}

func cat(parts ...[]Op) []Op {
	var out []Op
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// quotaSequence sets ZooKeeper quotas the way zkCli does and reads the
// stats node after creates, deletes, setData and a multi under the quota
// path, and after writes beside it; ZooKeeper keeps the stats in its
// DataTree, so both must show the same text and stat. With enforcement
// off (the default of both), a hard limit is passed without refusal.
var quotaSequence = cat(
	[]Op{
		{S: 0, Code: wire.OpCreate, Path: "{R}/q", Data: text("abc"), Flags: wire.FlagPersistent, ACL: "open"},
		{S: 0, Code: wire.OpCreate, Path: "{R}/q/a", Data: text("12345"), Flags: wire.FlagPersistent, ACL: "open"},
		{S: 0, Code: wire.OpCreate, Path: "{R}/qq", Data: text("beside"), Flags: wire.FlagPersistent, ACL: "open"},
	},
	setQuotaOps("/q", quotaHard),
	[]Op{
		{S: 1, Code: wire.OpGetData, Path: "/zookeeper/quota{R}/q/zookeeper_stats"},
		{S: 1, Code: wire.OpGetData, Path: "/zookeeper/quota{R}/q/zookeeper_limits"},
		{S: 0, Code: wire.OpCreate, Path: "{R}/q/b", Data: text("xy"), Flags: wire.FlagPersistent, ACL: "open"},
		{S: 0, Code: wire.OpSetData, Path: "{R}/q/a", Data: text("1"), Version: -1},
		{S: 0, Code: wire.OpCreate, Path: "{R}/qq/x", Data: text("not counted"), Flags: wire.FlagPersistent, ACL: "open"},
		{S: 1, Code: wire.OpGetData, Path: "/zookeeper/quota{R}/q/zookeeper_stats"},
		{S: 0, Code: wire.OpCreate, Path: "{R}/q/c", Data: text("past the hard limits"), Flags: wire.FlagPersistent, ACL: "open"},
		{S: 2, Code: wire.OpCreate, Path: "{R}/q/e", Data: text("eph"), Flags: wire.FlagEphemeral, ACL: "open"},
		{S: 0, Code: wire.OpDelete, Path: "{R}/q/b", Version: -1},
		{S: 0, Code: wire.OpMulti, Sub: []Op{
			{Code: wire.OpCreate, Path: "{R}/q/m", Data: text("mm"), Flags: wire.FlagPersistent, ACL: "open"},
			{Code: wire.OpSetData, Path: "{R}/q/m", Data: text("m"), Version: -1},
		}},
		{S: 0, Code: wire.OpMulti, Sub: []Op{
			{Code: wire.OpCreate, Path: "{R}/q/n", Data: text("nn"), Flags: wire.FlagPersistent, ACL: "open"},
			{Code: wire.OpCreate, Path: "{R}/none/n", Data: text("fails"), Flags: wire.FlagPersistent, ACL: "open"},
		}},
		{S: 1, Code: wire.OpGetData, Path: "/zookeeper/quota{R}/q/zookeeper_stats"},
		{S: 1, Code: wire.OpExists, Path: "/zookeeper/quota{R}/q/zookeeper_stats"},
	},
	// A quota below it: the deeper one counts what is under it.
	setQuotaOps("/q/a", quotaSoft),
	[]Op{
		{S: 0, Code: wire.OpCreate, Path: "{R}/q/a/x", Data: text("x"), Flags: wire.FlagPersistent, ACL: "open"},
		{S: 0, Code: wire.OpCreate, Path: "{R}/q/y", Data: text("y"), Flags: wire.FlagPersistent, ACL: "open"},
		{S: 1, Code: wire.OpGetData, Path: "/zookeeper/quota{R}/q/a/zookeeper_stats"},
		{S: 1, Code: wire.OpGetData, Path: "/zookeeper/quota{R}/q/zookeeper_stats"},
		// delquota: the limits node goes, and with it the counting.
		{S: 0, Code: wire.OpDelete, Path: "/zookeeper/quota{R}/q/a/zookeeper_limits", Version: -1},
		{S: 0, Code: wire.OpCreate, Path: "{R}/q/a/z", Data: text("z"), Flags: wire.FlagPersistent, ACL: "open"},
		{S: 1, Code: wire.OpGetData, Path: "/zookeeper/quota{R}/q/a/zookeeper_stats"},
		{S: 1, Code: wire.OpGetData, Path: "/zookeeper/quota{R}/q/zookeeper_stats"},
		// A stats node rewritten by a client is counted on from there.
		{S: 0, Code: wire.OpSetData, Path: "/zookeeper/quota{R}/q/zookeeper_stats", Data: text("count=100,bytes=100"), Version: -1},
		{S: 0, Code: wire.OpDelete, Path: "{R}/q/y", Version: -1},
		{S: 1, Code: wire.OpGetData, Path: "/zookeeper/quota{R}/q/zookeeper_stats"},
	},
)

// quotaEnforcedSequence runs where both enforce quotas: ZooKeeper with
// -Dzookeeper.enforceQuota=true, coordrun with --enforce-quota. Writes
// past a hard limit are refused with QUOTAEXCEEDED, in the order of
// ZooKeeper's checks (after existence for a create, before the version
// for setData), a soft limit only logs, and deletes always pass.
var quotaEnforcedSequence = cat(
	[]Op{
		{S: 0, Code: wire.OpCreate, Path: "{R}/q", Data: text("abc"), Flags: wire.FlagPersistent, ACL: "open"},
		{S: 0, Code: wire.OpCreate, Path: "{R}/q/a", Data: text("12345"), Flags: wire.FlagPersistent, ACL: "open"},
	},
	setQuotaOps("/q", quotaHard),
	[]Op{
		{S: 0, Code: wire.OpCreate, Path: "{R}/q/b", Flags: wire.FlagPersistent, ACL: "open"},
		{S: 0, Code: wire.OpCreate, Path: "{R}/q/c", Flags: wire.FlagPersistent, ACL: "open"},
		{S: 0, Code: wire.OpCreate, Path: "{R}/q/b", Flags: wire.FlagPersistent, ACL: "open"},
		{S: 0, Code: wire.OpCreate2, Path: "{R}/q/c", Data: text("x"), Flags: wire.FlagPersistentSequential, ACL: "open"},
		{S: 0, Code: wire.OpSetData, Path: "{R}/q/a", Data: text("123456789"), Version: 9},
		{S: 0, Code: wire.OpSetData, Path: "{R}/q/a", Data: text("1234"), Version: 9},
		{S: 0, Code: wire.OpSetData, Path: "{R}/q/a", Data: text("123456"), Version: -1},
		{S: 0, Code: wire.OpMulti, Sub: []Op{
			{Code: wire.OpDelete, Path: "{R}/q/b", Version: -1},
			{Code: wire.OpCreate, Path: "{R}/q/d", Flags: wire.FlagPersistent, ACL: "open"},
		}},
		{S: 0, Code: wire.OpDelete, Path: "{R}/q/b", Version: -1},
		{S: 0, Code: wire.OpMulti, Sub: []Op{
			{Code: wire.OpCreate, Path: "{R}/q/d", Flags: wire.FlagPersistent, ACL: "open"},
			{Code: wire.OpCreate, Path: "{R}/q/e", Flags: wire.FlagPersistent, ACL: "open"},
		}},
		{S: 1, Code: wire.OpGetData, Path: "/zookeeper/quota{R}/q/zookeeper_stats"},
		{S: 1, Code: wire.OpGetChildren, Path: "{R}/q"},
		// Soft limits below: passed, not refused.
		{S: 0, Code: wire.OpCreate, Path: "{R}/s", Flags: wire.FlagPersistent, ACL: "open"},
	},
	setQuotaOps("/s", quotaSoft),
	[]Op{
		{S: 0, Code: wire.OpCreate, Path: "{R}/s/a", Data: text("12345"), Flags: wire.FlagPersistent, ACL: "open"},
		{S: 0, Code: wire.OpCreate, Path: "{R}/s/b", Flags: wire.FlagPersistent, ACL: "open"},
		{S: 1, Code: wire.OpGetData, Path: "/zookeeper/quota{R}/s/zookeeper_stats"},
	},
)

// TestQuotaEnforcedAgainstZooKeeper compares quota enforcement with a
// ZooKeeper 3.8 of its own, started with -Dzookeeper.enforceQuota=true.
func TestQuotaEnforcedAgainstZooKeeper(t *testing.T) {
	if testing.Short() {
		t.Skip("starts ZooKeeper")
	}
	java := zookeeper.Require(t)
	zk, err := zookeeper.Start(java, "coordrun-difftest-zkq-", client.FourLetter, "zookeeper.enforceQuota=true")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(zk.Stop)
	tester := &Tester{Sessions: sessions,
		Ref: Target{Name: "zookeeper-3.8 (enforceQuota)", Addrs: []string{zk.Addr}},
		Test: Target{Name: "coordrun (--enforce-quota)", Addrs: ensembletest.Start(t, 1,
			func(c *ensemble.Config) { c.EnforceQuota = true }).Servers()}}
	f, err := tester.Check(quotaEnforcedSequence)
	if err != nil {
		t.Fatal(err)
	}
	if f != nil {
		for _, d := range f.Diffs {
			t.Errorf("ZooKeeper and coordrun differ:\n%s", f.Report(&d))
		}
	}
}
