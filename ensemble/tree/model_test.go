package tree

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// The model is a deliberately naive reimplementation of the rules: a flat
// map from path to node, with children and counts found by scanning every
// path, multis done on a full copy, and containers swept to a fixpoint. The
// randomized test checks that the real tree agrees with it after every
// transaction.

// ACL codes used by the model.
const (
	aclOpen     = iota // world:anyone ALL
	aclAlice           // digest alice ALL
	aclMixed           // world READ + digest alice ALL
	aclReadOnly        // world READ (the config node's)
	aclAuth            // "auth" ALL: becomes aclAlice, or is invalid
	aclEmpty           // invalid
	aclCodeCount
)

func aclList(code int) []ACL {
	switch code {
	case aclOpen:
		return OpenACL
	case aclAlice:
		return aliceOnly
	case aclMixed:
		return []ACL{{Perms: PermRead, Scheme: "world", ID: "anyone"}, {Perms: PermAll, Scheme: "digest", ID: alice.ID}}
	case aclReadOnly:
		return []ACL{{Perms: PermRead, Scheme: "world", ID: "anyone"}}
	case aclAuth:
		return []ACL{{Perms: PermAll, Scheme: "auth"}}
	}
	return []ACL{}
}

// Requesters.
const (
	whoAnon = iota
	whoAlice
	whoSuper
)

func identities(who int) []Identity {
	switch who {
	case whoAlice:
		return []Identity{localhost, alice}
	case whoSuper:
		return []Identity{superID}
	}
	return []Identity{localhost}
}

type mnode struct {
	data                      []byte
	acl                       int
	czxid, mzxid, pzxid       int64
	ctime, mtime              int64
	version, cversion, aversn int32
	owner                     int64
}

type model struct {
	nodes    map[string]*mnode
	sessions map[int64]bool
	next     int64
	swept    int // containers removed by sweep, to show the rule is exercised
}

func newModel() *model {
	m := &model{nodes: map[string]*mnode{}, sessions: map[int64]bool{}}
	for _, p := range []string{"/", "/zookeeper", "/zookeeper/quota"} {
		m.nodes[p] = &mnode{data: []byte{}}
	}
	m.nodes["/zookeeper/config"] = &mnode{acl: aclReadOnly, aversn: -1, data: []byte{}}
	return m
}

func (m *model) copy() *model {
	c := &model{nodes: map[string]*mnode{}, sessions: maps.Clone(m.sessions), next: m.next, swept: m.swept}
	for p, n := range m.nodes {
		nn := *n
		c.nodes[p] = &nn
	}
	return c
}

func mparent(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i <= 0 {
		return "/"
	}
	return p[:i]
}

func (m *model) children(p string) []string {
	var out []string
	for q := range m.nodes {
		if q != "/" && mparent(q) == p {
			out = append(out, q[strings.LastIndexByte(q, '/')+1:])
		}
	}
	slices.Sort(out)
	return out
}

// childIndex maps every path to its sorted child names, by brute force.
func (m *model) childIndex() map[string][]string {
	idx := map[string][]string{}
	for q := range m.nodes {
		if q != "/" {
			p := mparent(q)
			idx[p] = append(idx[p], q[strings.LastIndexByte(q, '/')+1:])
		}
	}
	for _, kids := range idx {
		slices.Sort(kids)
	}
	return idx
}

func (m *model) allowed(acl int, perm int32, who int) bool {
	if who == whoSuper {
		return true
	}
	switch acl {
	case aclOpen:
		return true
	case aclAlice:
		return who == whoAlice
	case aclMixed:
		return perm == PermRead || who == whoAlice
	case aclReadOnly:
		return perm == PermRead
	}
	panic("bad acl code")
}

// fixACL resolves an ACL code as ZooKeeper's fixupACL would.
func (m *model) fixACL(code, who int) (int, error) {
	switch code {
	case aclEmpty:
		return 0, ErrInvalidACL
	case aclAuth:
		if who != whoAlice {
			return 0, ErrInvalidACL
		}
		return aclAlice, nil
	}
	return code, nil
}

func (m *model) stat(p string, idx map[string][]string) Stat {
	n := m.nodes[p]
	return Stat{
		Czxid: n.czxid, Mzxid: n.mzxid, Ctime: n.ctime, Mtime: n.mtime,
		Version: n.version, Cversion: n.cversion, Aversion: n.aversn,
		EphemeralOwner: n.owner, DataLength: int32(len(n.data)),
		NumChildren: int32(len(idx[p])), Pzxid: n.pzxid,
	}
}

func (m *model) op(op Op, sess int64, who int, zxid, now int64) (string, error) {
	switch op.Kind {
	case OpCreate:
		if op.Mode == 5 || op.Mode == 6 {
			return "", ErrUnimplemented
		}
		if op.Mode < 0 || op.Mode > 4 {
			return "", ErrBadArguments
		}
		// ZooKeeper's order: the path's shape now, the whole path once
		// the parent has been looked up.
		if !strings.Contains(op.Path, "/") || strings.Contains(op.Path, "\x00") {
			return "", ErrBadArguments
		}
		seq := op.Mode == ModePersistentSequential || op.Mode == ModeEphemeralSequential
		var owner int64
		switch op.Mode {
		case ModeEphemeral, ModeEphemeralSequential:
			if !m.sessions[sess] {
				return "", ErrSessionExpired
			}
			owner = sess
		case ModeContainer:
			owner = math.MinInt64
		}
		acl, err := m.fixACL(aclCodeOf(op.ACL), who)
		if err != nil {
			return "", err
		}
		pp := mparent(op.Path)
		if op.Path == "/" {
			pp = "/"
		}
		parent := m.nodes[pp]
		if parent == nil {
			return "", ErrNoNode
		}
		if !m.allowed(parent.acl, PermCreate, who) {
			return "", ErrNoAuth
		}
		path := op.Path
		if seq {
			path += fmt.Sprintf("%010d", parent.cversion)
		}
		if ValidatePath(path, false) != nil {
			return "", ErrBadArguments
		}
		if m.nodes[path] != nil {
			return "", ErrNodeExists
		}
		if parent.owner > 0 {
			return "", ErrNoChildrenForEphemerals
		}
		m.nodes[path] = &mnode{data: bytes.Clone(op.Data), acl: acl, czxid: zxid, mzxid: zxid, pzxid: zxid,
			ctime: now, mtime: now, owner: owner}
		parent.cversion++
		parent.pzxid = zxid
		return path, nil

	case OpDelete:
		switch op.Path {
		case "/", "/zookeeper", "/zookeeper/quota", "/zookeeper/config":
			return "", ErrBadArguments
		}
		if !strings.Contains(op.Path, "/") || strings.Contains(op.Path, "\x00") {
			return "", ErrBadArguments
		}
		parent := m.nodes[mparent(op.Path)]
		if parent == nil {
			return "", ErrNoNode
		}
		if !m.allowed(parent.acl, PermDelete, who) {
			return "", ErrNoAuth
		}
		n := m.nodes[op.Path]
		if n == nil {
			return "", ErrNoNode
		}
		if op.Version != -1 && op.Version != n.version {
			return "", ErrBadVersion
		}
		if len(m.children(op.Path)) > 0 {
			return "", ErrNotEmpty
		}
		delete(m.nodes, op.Path)
		parent.pzxid = zxid
		return op.Path, nil

	case OpSetData:
		n := m.nodes[op.Path]
		if n == nil {
			return "", ErrNoNode
		}
		if !m.allowed(n.acl, PermWrite, who) {
			return "", ErrNoAuth
		}
		if op.Version != -1 && op.Version != n.version {
			return "", ErrBadVersion
		}
		n.data = bytes.Clone(op.Data)
		n.version++
		n.mzxid = zxid
		n.mtime = now
		return op.Path, nil

	case OpSetACL:
		acl, err := m.fixACL(aclCodeOf(op.ACL), who)
		if err != nil {
			return "", err
		}
		n := m.nodes[op.Path]
		if n == nil {
			return "", ErrNoNode
		}
		if !m.allowed(n.acl, PermAdmin, who) {
			return "", ErrNoAuth
		}
		if op.Version != -1 && op.Version != n.aversn {
			return "", ErrBadVersion
		}
		n.acl = acl
		n.aversn++
		return op.Path, nil

	case OpCheck:
		n := m.nodes[op.Path]
		if n == nil {
			return "", ErrNoNode
		}
		if !m.allowed(n.acl, PermRead, who) {
			return "", ErrNoAuth
		}
		if op.Version != -1 && op.Version != n.version {
			return "", ErrBadVersion
		}
		return op.Path, nil
	}
	panic("bad op")
}

func aclCodeOf(acl []ACL) int {
	for c := range aclCodeCount {
		if slices.Equal(acl, aclList(c)) {
			return c
		}
	}
	panic(fmt.Sprintf("unknown ACL %v", acl))
}

// sweep removes containers that have had children and have none, until
// nothing changes: ZooKeeper's ContainerManager rule.
func (m *model) sweep(zxid int64) {
	for changed := true; changed; {
		changed = false
		idx := m.childIndex()
		for _, p := range slices.Sorted(maps.Keys(m.nodes)) {
			n := m.nodes[p]
			if n.owner == math.MinInt64 && n.cversion > 0 && len(idx[p]) == 0 {
				delete(m.nodes, p)
				m.nodes[mparent(p)].pzxid = zxid
				m.swept++
				changed = true
			}
		}
	}
}

type mresult struct {
	errs  []error
	paths []string
	err   error
	id    int64
}

func (m *model) apply(txn *Txn, who int, zxid int64) (*model, mresult) {
	var r mresult
	switch txn.Kind {
	case TxnCreateSession:
		if m.next <= 0 {
			m.next = (txn.Time << 12) & math.MaxInt64
			if m.next == 0 {
				m.next = 1
			}
		}
		r.id = m.next
		m.sessions[m.next] = true
		m.next++
		return m, r
	case TxnCloseSession:
		if !m.sessions[txn.Session] {
			return m, r
		}
		for p, n := range m.nodes {
			if n.owner == txn.Session {
				delete(m.nodes, p)
				m.nodes[mparent(p)].pzxid = zxid
			}
		}
		m.sweep(zxid)
		delete(m.sessions, txn.Session)
		return m, r
	}
	r.errs = make([]error, len(txn.Ops))
	r.paths = make([]string, len(txn.Ops))
	if txn.Session != 0 && !m.sessions[txn.Session] {
		r.err = ErrSessionExpired
		for i := range r.errs {
			r.errs[i] = ErrRuntimeInconsistency
		}
		if len(r.errs) > 0 {
			r.errs[0] = ErrSessionExpired
		}
		return m, r
	}
	c := m.copy()
	for i, op := range txn.Ops {
		p, err := c.op(op, txn.Session, who, zxid, txn.Time)
		if err != nil {
			r.err = err
			r.errs[i] = err
			for j := i + 1; j < len(txn.Ops); j++ {
				r.errs[j] = ErrRuntimeInconsistency
			}
			return m, r
		}
		r.paths[i] = p
	}
	c.sweep(zxid)
	return c, r
}

// opGen produces random transactions biased towards interesting collisions.
type opGen struct {
	rng  *rand.Rand
	m    *model
	dead []int64 // closed session ids
}

func (g *opGen) existing() string {
	paths := slices.Sorted(maps.Keys(g.m.nodes))
	return paths[g.rng.IntN(len(paths))]
}

func (g *opGen) randomPath() string {
	names := []string{"a", "b", "c"}
	depth := 1 + g.rng.IntN(3)
	var sb strings.Builder
	for range depth {
		sb.WriteString("/" + names[g.rng.IntN(len(names))])
	}
	return sb.String()
}

func (g *opGen) path() string {
	if g.rng.IntN(10) < 6 {
		return g.existing()
	}
	return g.randomPath()
}

func (g *opGen) version(p string) int32 {
	switch x := g.rng.IntN(20); {
	case x < 10:
		return -1
	case x < 17:
		if n := g.m.nodes[p]; n != nil {
			return n.version
		}
	}
	return int32(g.rng.IntN(3))
}

func (g *opGen) aclCode() int {
	if g.rng.IntN(10) < 7 {
		return aclOpen
	}
	return []int{aclAlice, aclMixed, aclReadOnly, aclAuth, aclEmpty}[g.rng.IntN(5)]
}

func (g *opGen) op() Op {
	crowded := len(g.m.nodes) > 80
	x := g.rng.IntN(100)
	switch {
	case x < 40 && !crowded:
		var p string
		switch g.rng.IntN(3) {
		case 0:
			p = g.randomPath()
		default:
			p = joinPath(g.existing(), []string{"a", "b", "c", "d", "s-"}[g.rng.IntN(5)])
		}
		modes := []Mode{0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 3, 3, 4, 4, 4, 5, 9}
		op := Op{Kind: OpCreate, Path: p, Mode: modes[g.rng.IntN(len(modes))], ACL: aclList(g.aclCode())}
		if g.rng.IntN(3) > 0 {
			op.Data = []byte(fmt.Sprint(g.rng.IntN(1000)))
		}
		if g.rng.IntN(50) == 0 {
			op.Path += "/" // invalid unless sequential
		}
		return op
	case x < 65:
		p := g.path()
		return Op{Kind: OpDelete, Path: p, Version: g.version(p)}
	case x < 80:
		p := g.path()
		return Op{Kind: OpSetData, Path: p, Version: g.version(p), Data: []byte(fmt.Sprint("d", g.rng.IntN(100)))}
	case x < 88:
		p := g.path()
		v := int32(-1)
		if n := g.m.nodes[p]; n != nil && g.rng.IntN(2) == 0 {
			v = n.aversn + int32(g.rng.IntN(2))
		}
		return Op{Kind: OpSetACL, Path: p, Version: v, ACL: aclList(g.aclCode())}
	default:
		p := g.path()
		return Op{Kind: OpCheck, Path: p, Version: g.version(p)}
	}
}

func (g *opGen) txn(step int) (*Txn, int) {
	now := baseTime + int64(step)*7
	live := slices.Sorted(maps.Keys(g.m.sessions))
	switch x := g.rng.IntN(100); {
	case x < 4 || len(live) == 0 && x < 20:
		return &Txn{Kind: TxnCreateSession, Time: now, Timeout: int32(g.rng.IntN(60000)), Password: []byte{byte(step)}}, whoAnon
	case x < 8:
		var id int64
		switch {
		case len(live) > 0 && g.rng.IntN(4) > 0:
			id = live[g.rng.IntN(len(live))]
			g.dead = append(g.dead, id)
		case len(g.dead) > 0:
			id = g.dead[g.rng.IntN(len(g.dead))]
		default:
			id = 12345
		}
		return &Txn{Kind: TxnCloseSession, Session: id, Time: now}, whoAnon
	}
	txn := &Txn{Kind: TxnOps, Time: now}
	switch x := g.rng.IntN(100); {
	case x < 35 && len(live) > 0:
		txn.Session = live[g.rng.IntN(len(live))]
	case x < 40 && len(g.dead) > 0:
		txn.Session = g.dead[g.rng.IntN(len(g.dead))]
	}
	who := whoAnon
	switch x := g.rng.IntN(10); {
	case x < 2:
		who = whoAlice
	case x < 3:
		who = whoSuper
	}
	txn.Auth = identities(who)
	n := 1
	if g.rng.IntN(5) == 0 {
		txn.Multi = true
		n = g.rng.IntN(5)
	}
	for range n {
		txn.Ops = append(txn.Ops, g.op())
	}
	return txn, who
}

func TestRandomAgainstModel(t *testing.T) {
	steps := 5000
	if testing.Short() {
		steps = 1000
	}
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 99))
			tr, replica := New(), New()
			g := &opGen{rng: rng, m: newModel()}
			stats := map[string]int{}
			for step := range steps {
				zxid := int64(step + 2)
				txn, who := g.txn(step)

				// The replica applies the txn as decoded from its log
				// encoding, as a follower would.
				b, err := txn.MarshalBinary()
				if err != nil {
					t.Fatal(err)
				}
				var decoded Txn
				if err := decoded.UnmarshalBinary(b); err != nil {
					t.Fatal(err)
				}

				got := tr.Apply(txn, zxid)
				rep := replica.Apply(&decoded, zxid)
				var want mresult
				g.m, want = g.m.apply(txn, who, zxid)

				ctx := fmt.Sprintf("step %d txn %+v", step, *txn)
				compareResult(t, ctx, got, rep, want)
				if err := tr.Check(); err != nil {
					t.Fatalf("%s: Check: %v", ctx, err)
				}
				compareState(t, ctx, tr, g.m)
				if step%500 == 0 || step == steps-1 {
					if !tr.Equal(replica) {
						t.Fatalf("%s: replica diverged", ctx)
					}
					if !clone(t, tr).Equal(tr) {
						t.Fatalf("%s: snapshot differs", ctx)
					}
				}
				for _, r := range got.Ops {
					stats[outcome(r.Err)]++
				}
			}
			t.Logf("outcomes: %v; containers swept %d; final nodes %d, sessions %d", stats, g.m.swept, tr.NodeCount(), len(tr.Sessions()))
			if testing.Short() {
				return // too few steps to insist on covering every outcome
			}
			if g.m.swept == 0 {
				t.Error("no container was ever swept")
			}
			for _, e := range allErrors {
				if stats[outcome(e)] == 0 {
					t.Errorf("outcome %q never exercised", outcome(e))
				}
			}
		})
	}
}

var allErrors = []error{nil, ErrNoNode, ErrNodeExists, ErrBadVersion, ErrNotEmpty, ErrNoAuth, ErrInvalidACL,
	ErrBadArguments, ErrNoChildrenForEphemerals, ErrSessionExpired, ErrRuntimeInconsistency, ErrUnimplemented}

func outcome(err error) string {
	for _, e := range allErrors[1:] {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	if err == nil {
		return "ok"
	}
	return "other: " + err.Error()
}

func compareResult(t *testing.T, ctx string, got, rep Result, want mresult) {
	t.Helper()
	if got.SessionID != want.id || rep.SessionID != want.id {
		t.Fatalf("%s: session id %d / %d, model %d", ctx, got.SessionID, rep.SessionID, want.id)
	}
	if !errors.Is(got.Err, want.err) || (got.Err == nil) != (want.err == nil) {
		t.Fatalf("%s: error %v, model %v", ctx, got.Err, want.err)
	}
	if len(got.Ops) != len(want.errs) {
		t.Fatalf("%s: %d op results, model %d", ctx, len(got.Ops), len(want.errs))
	}
	for i, r := range got.Ops {
		if !errors.Is(r.Err, want.errs[i]) || (r.Err == nil) != (want.errs[i] == nil) {
			t.Fatalf("%s: op %d error %v, model %v", ctx, i, r.Err, want.errs[i])
		}
		if r.Err == nil && want.err == nil && r.Path != want.paths[i] {
			t.Fatalf("%s: op %d path %q, model %q", ctx, i, r.Path, want.paths[i])
		}
	}
	if !eventsEqual(got.Events, rep.Events) || (got.Err == nil) != (rep.Err == nil) {
		t.Fatalf("%s: replica result differs", ctx)
	}
}

func compareState(t *testing.T, ctx string, tr *Tree, m *model) {
	t.Helper()
	if tr.NodeCount() != len(m.nodes) {
		t.Fatalf("%s: %d nodes, model %d", ctx, tr.NodeCount(), len(m.nodes))
	}
	ephemerals := 0
	idx := m.childIndex()
	for p, n := range m.nodes {
		data, st, err := tr.Get(p, superAuth)
		if err != nil {
			t.Fatalf("%s: Get(%s): %v", ctx, p, err)
		}
		if want := m.stat(p, idx); st != want {
			t.Fatalf("%s: stat of %s\n got %+v\nwant %+v", ctx, p, st, want)
		}
		if !bytes.Equal(data, n.data) || (data == nil) != (n.data == nil) {
			t.Fatalf("%s: data of %s %q, model %q", ctx, p, data, n.data)
		}
		acl, _, _ := tr.GetACL(p, superAuth)
		if !slices.Equal(acl, aclList(n.acl)) {
			t.Fatalf("%s: ACL of %s %v, model %v", ctx, p, acl, aclList(n.acl))
		}
		kids, _, _ := tr.Children(p, superAuth)
		if want := idx[p]; !slices.Equal(kids, want) {
			t.Fatalf("%s: children of %s %v, model %v", ctx, p, kids, want)
		}
		if n.owner > 0 {
			ephemerals++
		}
	}
	if tr.EphemeralCount() != ephemerals {
		t.Fatalf("%s: %d ephemerals, model %d", ctx, tr.EphemeralCount(), ephemerals)
	}
	ss := tr.Sessions()
	if len(ss) != len(m.sessions) {
		t.Fatalf("%s: %d sessions, model %d", ctx, len(ss), len(m.sessions))
	}
	for _, s := range ss {
		if !m.sessions[s.ID] {
			t.Fatalf("%s: unexpected session %d", ctx, s.ID)
		}
		var want []string
		for p, n := range m.nodes {
			if n.owner == s.ID {
				want = append(want, p)
			}
		}
		slices.Sort(want)
		if got := tr.Ephemerals(s.ID, "/"); !slices.Equal(got, want) && len(got)+len(want) > 0 {
			t.Fatalf("%s: ephemerals of %d %v, model %v", ctx, s.ID, got, want)
		}
	}
}
