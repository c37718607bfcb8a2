package difftest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"

	"github.com/coordrun/coordrun/ensemble/wire"
)

// fixedSequences are sequences found by testers outside the project that
// once set ZooKeeper and coordrun apart. Each runs on every make test
// against a real ZooKeeper 3.8: matched now, or explained by an entry of
// KnownDifferences.
var fixedSequences = []struct {
	name string
	seq  []Op
}{
	{name: "zookeeper-quotas", seq: quotaSequence},
	{name: "sync-of-a-4-byte-character", seq: []Op{
		{S: 0, Code: wire.OpCreate, Path: "{R}/b", Data: Data{Kind: DataEmpty}, Flags: wire.FlagPersistent, ACL: "open"},
		{S: 0, Code: wire.OpSync, Path: "{R}/b/\U0001F600"},
		{S: 0, Code: wire.OpCreate, Path: "{R}/b/\U0001F600", Data: Data{Kind: DataEmpty}, Flags: wire.FlagPersistent, ACL: "open"},
		{S: 0, Code: wire.OpExists, Path: "{R}/b/\U0001F600", Watch: true},
	}},
	{name: "multiread-holding-a-write", seq: []Op{
		{S: 0, Code: wire.OpCreate, Path: "{R}/b", Data: Data{Kind: DataEmpty}, Flags: wire.FlagPersistent, ACL: "open"},
		{S: 0, Code: wire.OpMultiRead, Sub: []Op{
			{Code: wire.OpCreate, Path: "{R}/b/mr", Data: Data{Kind: DataEmpty}, Flags: wire.FlagPersistent, ACL: "open"},
		}},
	}},
	{name: "czxid-after-refused-writes", seq: []Op{
		{S: 0, Code: wire.OpCreate, Path: "{R}/b", Data: Data{Kind: DataEmpty}, Flags: wire.FlagPersistent, ACL: "open"},
		{S: 1, Code: wire.OpSetData, Path: "{S}", Data: Data{Kind: DataText, Text: "d99"}, Version: -1},
		{S: 1, Code: wire.OpExists, Path: "{R}/b", Watch: true},
		{S: 1, Code: wire.OpGetData, Path: "{R}/b"},
		{S: 1, Code: wire.OpGetChildren2, Path: "{R}/b/x/y"},
		{S: 1, Code: wire.OpGetACL, Path: "{R}/b/" + strings.Repeat("n", 258)},
		{S: 1, Code: wire.OpSync, Path: "{R}/b/z/y"},
		{S: 0, Code: wire.OpCreate, Path: "{R}/b/y", Data: Data{Kind: DataNull}, Flags: wire.FlagPersistent, ACL: "read-admin"},
		{S: 0, Code: wire.OpSync, Path: "{R}/b"},
		{S: 0, Code: wire.OpAddWatch, Path: "{R}/b", Mode: wire.AddWatchPersistent},
		{S: 0, Code: wire.OpCreate, Path: "{R}/b/y/x/y", Data: Data{Kind: DataText, Text: "d344"}, Flags: wire.FlagEphemeral, ACL: "ip"},
		{S: 0, Code: wire.OpSetACL, Path: "{S}", ACL: "open-twice", Version: -1},
		{S: 1, Code: wire.OpExists, Path: "{R}/b/y"},
		{S: 1, Code: wire.OpExists, Path: "{R}/b/y", Watch: true},
		{S: 0, Code: wire.OpCreateTTL, Path: "{R}/b/x", Data: Data{Kind: DataEmpty}, Flags: wire.FlagPersistent, ACL: "open"},
		{S: 1, Code: wire.OpAddWatch, Path: "{R}/b", Mode: wire.AddWatchPersistent},
		{S: 1, Code: wire.OpSetData, Path: "{R}/b/x/y/y", Data: Data{Kind: DataNull}, Version: -1},
		{S: 0, Code: wire.OpGetChildren, Path: "{S}"},
		{S: 0, Code: wire.OpDelete, Path: "{R}/b/y/x/y", Version: 0},
		{S: 1, Code: wire.OpSetData, Path: "{R}/b/y", Data: Data{Kind: DataText, Text: "d940"}, Version: 2},
		{S: 1, Code: wire.OpCreateContainer, Path: "{R}/b/z", Data: Data{Kind: DataText, Text: "d577"}, Flags: wire.FlagContainer, ACL: "open"},
		{S: 1, Code: wire.OpSetData, Path: "{R}/b/y", Data: Data{Kind: DataEmpty}, Version: -1},
		{S: 1, Code: wire.OpGetChildren2, Path: "{R}/b"},
		{S: 1, Code: wire.OpGetAllChildrenNumber, Path: "{R}/b"},
		{S: 0, Code: wire.OpAuth, Auth: "digest u1:p1"},
		{S: 1, Code: wire.OpGetACL, Path: "{R}/b/日本"},
		{S: 1, Code: wire.OpExists, Path: "{R}/b/z"},
		{S: 1, Code: wire.OpExists, Path: "{R}/b/y"},
	}},
}

func TestFixedSequences(t *testing.T) {
	if testing.Short() {
		t.Skip("starts ZooKeeper")
	}
	tester := &Tester{Sessions: sessions,
		Ref:  Target{Name: "zookeeper-3.8", Addrs: []string{startZooKeeper(t)}},
		Test: Target{Name: "coordrun", Addrs: startCoordrun(t, 1)}}
	for _, fs := range fixedSequences {
		t.Run(fs.name, func(t *testing.T) {
			f, err := tester.Check(fs.seq)
			if err != nil {
				t.Fatal(err)
			}
			if f == nil {
				return
			}
			for _, d := range f.Diffs {
				if d.Known == nil {
					t.Errorf("ZooKeeper and coordrun differ:\n%s", f.Report(&d))
				}
			}
		})
	}
}

// TestRefusedWritesTakeZxids compares how far czxids move across writes
// refused before they reach the tree (a TTL create while TTL nodes are
// off, the delete of a system node): ZooKeeper gives each such refusal a
// zxid, so a later node's czxid counts it, and a client that compares
// czxids sees the same distances on both. The traces rank zxids, which
// hides such gaps; this reads them whole.
func TestRefusedWritesTakeZxids(t *testing.T) {
	if testing.Short() {
		t.Skip("starts ZooKeeper")
	}
	gap := func(addr string) []int64 {
		c, _, err := gozk.Connect([]string{addr}, 10*time.Second, gozk.WithLogInfo(false))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		acl := gozk.WorldACL(gozk.PermAll)
		root := fmt.Sprintf("/gap-%d", roots.Add(1))
		var last int64
		var gaps []int64
		mark := func(refused error) {
			if refused == nil {
				t.Fatalf("%s: a write meant to be refused succeeded", addr)
			}
			p, err := c.Create(fmt.Sprintf("%s-%d", root, len(gaps)), nil, 0, acl)
			if err != nil {
				t.Fatal(err)
			}
			_, st, err := c.Exists(p)
			if err != nil {
				t.Fatal(err)
			}
			gaps = append(gaps, st.Czxid-last)
			last = st.Czxid
		}
		_, err = c.Create(root+"-x/y", nil, 0, acl) // no parent
		mark(err)
		_, err = c.CreateTTL(root+"-ttl", nil, gozk.FlagTTL, acl, time.Second) // TTL nodes off
		mark(err)
		mark(c.Delete("/zookeeper", -1))
		_, err = c.Set(root+"-none", nil, -1) // no node
		mark(err)
		return gaps[1:]
	}
	ref, got := gap(startZooKeeper(t)), gap(startCoordrun(t, 1)[0])
	// Once an ensemble groups writes, a log entry's zxids are index<<8|k
	// (docs/guarantees.md, "What the ensemble guarantees"): an entry of its own is a
	// step of 256 there.
	if grouped := !slices.ContainsFunc(got, func(d int64) bool { return d%256 != 0 }); grouped {
		for i := range got {
			got[i] /= 256
		}
	}
	if !slices.Equal(ref, got) {
		t.Errorf("czxid distances across refused writes: ZooKeeper %v, coordrun %v", ref, got)
	}
}
