package difftest

import (
	"math/rand/v2"

	"github.com/coordrun/coordrun/ensemble/wire"
)

// A small path space, so that ops collide: creates meet existing nodes,
// deletes meet children, watches meet changes.
var (
	goodPaths = []string{"{R}", "{R}/a", "{R}/b", "{R}/c", "{R}/a/x", "{R}/a/y", "{R}/b/x", "{R}/a/x/z", "{S}", "{S}/x"}
	seqPaths  = []string{"{R}/s-", "{R}/a/s-", "{R}/", "{R}/a/"}
	badPaths  = []string{"{R}/", "{R}//a", "{N}/a", "", "{R}/a/.", "{R}/a/..", "{R}/a\x00b", "/zookeeper/{N}"}
	goodACLs  = []string{"open", "open", "open", "open", "read", "noread", "creator", "u1", "u1+read", "ip", "ip-other"}
	badACLs   = []string{"bad-empty", "bad-null", "bad-scheme", "bad-ip", "bad-digest", "bad-world"}
	versions  = []int32{-1, -1, 0, 0, 1, 2, 7}
	// Requests on the nodes every sequence shares, each of which leaves
	// them as they were (or fails): their stat and data reflect every
	// earlier sequence, so reading them would compare histories.
	systemOps = []Op{
		{Code: wire.OpCreate, Path: "/", ACL: "open"},
		{Code: wire.OpCreate, Path: "/zookeeper", ACL: "open"},
		{Code: wire.OpCreate, Path: "/zookeeper/config", ACL: "open"},
		{Code: wire.OpDelete, Path: "/", Version: -1},
		{Code: wire.OpDelete, Path: "/zookeeper", Version: -1},
		{Code: wire.OpDelete, Path: "/zookeeper/config", Version: 7},
		{Code: wire.OpDelete, Path: "/zookeeper/quota", Version: 7},
		{Code: wire.OpSetData, Path: "/zookeeper/config", Data: Data{Kind: DataText, Text: "x"}, Version: -1},
		{Code: wire.OpSetData, Path: "/zookeeper/quota", Data: Data{Kind: DataText, Text: "x"}, Version: 7},
		{Code: wire.OpSetData, Path: "/", Data: Data{Kind: DataText, Text: "x"}, Version: 1 << 30},
		{Code: wire.OpGetACL, Path: "/zookeeper/config"},
		{Code: wire.OpSetACL, Path: "/zookeeper/config", ACL: "open", Version: -1},
		{Code: wire.OpSetACL, Path: "/", ACL: "read", Version: 1 << 30},
		{Code: wire.OpExists, Path: "/zookeeper/config/x"},
		{Code: wire.OpGetChildren, Path: "/zookeeper/config"},
		{Code: wire.OpGetData, Path: "/zookeeper/config", Watch: true},
		{Code: wire.OpExists, Path: "/zookeeper/config"},
	}
	auths = []string{"digest u1:pw1", "digest u2:pw2", "digest nocolon"}
)

// Generate returns a sequence of n ops on sessions 0..sessions-1, the
// same for the same seed.
func Generate(seed uint64, n, sessions int) []Op {
	g := gen{r: rand.New(rand.NewPCG(seed, 0x64696666)), sessions: sessions}
	seq := make([]Op, 0, n)
	for len(seq) < n {
		seq = append(seq, g.op())
	}
	return seq
}

type gen struct {
	r        *rand.Rand
	sessions int
}

func pick[T any](r *rand.Rand, s []T) T { return s[r.IntN(len(s))] }

func (g *gen) path() string {
	if g.r.IntN(12) == 0 {
		return pick(g.r, badPaths)
	}
	return pick(g.r, goodPaths)
}

func (g *gen) data() Data {
	switch g.r.IntN(6) {
	case 0:
		return Data{Kind: DataNull}
	case 1:
		return Data{Kind: DataEmpty}
	}
	return Data{Kind: DataText, Text: pick(g.r, []string{"x", "hello", "0123456789"})}
}

func (g *gen) acl() string {
	if g.r.IntN(8) == 0 {
		return pick(g.r, badACLs)
	}
	return pick(g.r, goodACLs)
}

func (g *gen) create() Op {
	o := Op{Code: wire.OpCreate, Path: g.path(), Data: g.data(), ACL: "open"}
	if g.r.IntN(4) == 0 {
		o.ACL = g.acl()
	}
	switch g.r.IntN(10) {
	case 0, 1, 2, 3:
	case 4, 5:
		o.Flags = wire.FlagEphemeral
	case 6:
		o.Flags, o.Path = wire.FlagPersistentSequential, pick(g.r, seqPaths)
	case 7:
		o.Flags, o.Path = wire.FlagEphemeralSequential, pick(g.r, seqPaths)
	case 8:
		o.Code, o.Flags = wire.OpCreateContainer, wire.FlagContainer
	case 9:
		o.Flags = pick(g.r, []int32{wire.FlagContainer, wire.FlagPersistentWithTTL, 7, -1})
	}
	switch g.r.IntN(8) {
	case 0, 1:
		if o.Code == wire.OpCreate {
			o.Code = wire.OpCreate2
		}
	case 2:
		if g.r.IntN(4) == 0 {
			o.Code = wire.OpCreateTTL
		}
	}
	return o
}

// sub is one operation of a multi; reads of a multiRead when read is set.
func (g *gen) sub(read bool) Op {
	if read {
		return Op{Code: pick(g.r, []int32{wire.OpGetData, wire.OpGetChildren}), Path: g.path()}
	}
	if g.r.IntN(24) == 0 {
		// A read inside a write multi.
		return Op{Code: pick(g.r, []int32{wire.OpGetData, wire.OpGetChildren}), Path: g.path()}
	}
	switch g.r.IntN(4) {
	case 0:
		return Op{Code: wire.OpCheck, Path: g.path(), Version: pick(g.r, versions)}
	case 1:
		c := g.create()
		if c.Code == wire.OpCreateTTL && g.r.IntN(4) != 0 || c.Code == wire.OpCreateContainer && g.r.IntN(2) == 0 {
			c.Code = wire.OpCreate
		}
		if g.r.IntN(12) == 0 {
			// An opcode at odds with the flags: ZooKeeper 3.8 goes by
			// the flags inside a multi.
			c.Code = pick(g.r, []int32{wire.OpCreateContainer, wire.OpCreateTTL})
		}
		return c
	case 2:
		return Op{Code: wire.OpDelete, Path: g.path(), Version: pick(g.r, versions)}
	}
	return Op{Code: wire.OpSetData, Path: g.path(), Data: g.data(), Version: pick(g.r, versions)}
}

// bad is input a server must refuse; it may end the connection, so it
// runs on a throwaway session.
func (g *gen) bad() Op {
	o := Op{Scratch: true}
	switch g.r.IntN(8) {
	case 0:
		o.Code = pick(g.r, []int32{10, 23, 99, 108, 999, -5})
		o.Path = "{R}/a"
	case 1:
		o.Code, o.Path, o.Data, o.ACL = wire.OpCreate, "{R}/big", Data{Kind: DataBig}, "open"
	case 2:
		o.Code, o.Path, o.Data, o.Version = wire.OpSetData, "{R}", Data{Kind: DataBig}, -1
	case 3: // a path length past the end of the frame
		o.Code, o.Raw = pick(g.r, []int32{wire.OpGetData, wire.OpExists, wire.OpCreate, wire.OpDelete}), []byte{0, 0, 3, 232, 'a', 'b'}
	case 4: // a negative string length
		o.Code, o.Raw = pick(g.r, []int32{wire.OpGetData, wire.OpCreate, wire.OpSetData}), []byte{0xff, 0xff, 0xff, 0xf0}
	case 5: // an empty body
		o.Code, o.Raw = pick(g.r, []int32{wire.OpGetData, wire.OpCreate, wire.OpSetData, wire.OpMulti, wire.OpSync}), []byte{}
	case 6: // a multi header cut short
		o.Code, o.Raw = wire.OpMulti, []byte{0, 0, 0, 1, 0, 0, 0}
	case 7:
		o.Code, o.Auth = wire.OpAuth, pick(g.r, []string{"nosuch x", "ip 127.0.0.1", "world anyone"})
	}
	return o
}

func (g *gen) op() Op {
	s := g.r.IntN(g.sessions)
	var o Op
	switch w := g.r.IntN(100); {
	case w < 22:
		o = g.create()
	case w < 30:
		o = Op{Code: wire.OpDelete, Path: g.path(), Version: pick(g.r, versions)}
	case w < 40:
		o = Op{Code: wire.OpSetData, Path: g.path(), Data: g.data(), Version: pick(g.r, versions)}
	case w < 58:
		o = Op{Code: pick(g.r, []int32{wire.OpExists, wire.OpGetData, wire.OpGetChildren, wire.OpGetChildren2}),
			Path: g.path(), Watch: g.r.IntN(2) == 0}
	case w < 61:
		o = Op{Code: wire.OpGetACL, Path: g.path()}
	case w < 65:
		// Only inside the root: an ACL set on / or /zookeeper would
		// outlive the sequence (and could lock later roots out).
		o = Op{Code: wire.OpSetACL, Path: pick(g.r, goodPaths), ACL: g.acl(), Version: pick(g.r, versions)}
	case w < 72:
		o = Op{Code: wire.OpMulti}
		for n := 1 + g.r.IntN(4); n > 0; n-- {
			o.Sub = append(o.Sub, g.sub(false))
		}
	case w < 74:
		o = Op{Code: wire.OpMultiRead}
		for n := 1 + g.r.IntN(3); n > 0; n-- {
			o.Sub = append(o.Sub, g.sub(true))
		}
	case w < 76:
		o = Op{Code: wire.OpSync, Path: g.path()}
	case w < 81:
		o = Op{Code: wire.OpAddWatch, Path: g.path(), Mode: pick(g.r, []int32{wire.AddWatchPersistent, wire.AddWatchPersistentRecursive, wire.AddWatchPersistentRecursive, 2})}
	case w < 85:
		o = Op{Code: pick(g.r, []int32{wire.OpCheckWatches, wire.OpRemoveWatches}), Path: g.path(),
			Mode: pick(g.r, []int32{wire.WatcherChildren, wire.WatcherData, wire.WatcherAny, 4})}
	case w < 87:
		o = Op{Code: wire.OpAuth, Auth: pick(g.r, auths)}
	case w < 89:
		o = Op{Code: wire.OpWhoAmI}
	case w < 90:
		o = systemOps[g.r.IntN(len(systemOps))]
	case w < 91:
		// Inside the root: counts above it include other sequences' nodes.
		o = Op{Code: pick(g.r, []int32{wire.OpGetEphemerals, wire.OpGetAllChildrenNumber}), Path: pick(g.r, goodPaths)}
	default:
		o = g.bad()
	}
	o.S = s
	return o
}
