package difftest

import (
	"bytes"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/coordrun/coordrun/ensemble/wire"
)

// Target is a server (or ensemble) a sequence runs against.
type Target struct {
	Name string
	// Addrs are client addresses; session i connects to Addrs[i%len].
	Addrs []string
	// TamperReply and DropEvent alter what the client sees, to show in
	// tests that the tester notices a wrong reply or a lost event.
	TamperReply func(o Op, reply wire.Record)
	DropEvent   func(wire.WatcherEvent) bool
	// Sync makes the barrier a sync, for sessions on different members
	// of an ensemble: a member answers it only once it has applied every
	// write committed before it, and so fired that write's watches.
	Sync bool
}

// sessionTimeout is asked for by every session: within what both targets
// grant (the test ZooKeeper grants at most 20 s), and far above a
// sequence's run time, so no session expires inside one.
const sessionTimeout = 20000

// Line is one observation of a run; Op is the index of the op during
// which it was made (-1 for setup).
type Line struct {
	Op   int
	Text string
}

// Trace is what one target showed for a sequence, normalised so that two
// targets' traces are equal exactly when they behaved alike.
type Trace struct {
	Target string
	Root   string
	Lines  []Line
}

func (t *Trace) String() string {
	var b strings.Builder
	for _, l := range t.Lines {
		b.WriteString(l.Text)
		b.WriteByte('\n')
	}
	return b.String()
}

type runner struct {
	tg      Target
	root    string
	name    string // root without its slash
	sess    []*session
	owners  map[int64]string
	lines   []Line
	cur     int
	lastSeq string
}

// run plays seq against tg under the fresh root (e.g. "/dt-7r"). An error
// means the run could not be set up, not that the target misbehaved.
func run(tg Target, root string, sessions int, seq []Op) (*Trace, error) {
	r := &runner{tg: tg, root: root, name: root[1:], owners: map[int64]string{0: "0"}, cur: -1,
		lastSeq: root + "/no-sequential-yet"}
	defer func() {
		for _, s := range r.sess {
			s.close()
		}
	}()
	for i := 0; i < sessions; i++ {
		s, err := dial(tg.Addrs[i%len(tg.Addrs)], sessionTimeout)
		if err != nil {
			return nil, err
		}
		r.watch(s, fmt.Sprintf("s%d", i))
		r.owners[s.resp.SessionID] = fmt.Sprintf("s%d", i)
		r.sess = append(r.sess, s)
		r.add("setup s%d timeout=%d", i, s.resp.Timeout)
	}
	h, _, err := r.sess[0].call(r.sess[0].nextXid(), wire.OpCreate,
		&wire.CreateRequest{Path: root, ACL: acls["open"]}, nil)
	if err != nil || h.Err != wire.OK {
		return nil, fmt.Errorf("creating %s on %s: %v %v", root, tg.Name, h.Err, err)
	}
	// Every session sees the root before the first op: on an ensemble
	// they may be on members that have not applied it yet.
	r.barrier()
	for i, o := range seq {
		r.cur = i
		r.add("#%d %v", i, o)
		r.exec(o)
		r.barrier()
	}
	// Nodes outside the root outlive the run; remove the one a sequence
	// may have made under /zookeeper, from a session of its own since the
	// sequence's may be gone.
	if s, err := dial(tg.Addrs[0], sessionTimeout); err == nil {
		_, _, _ = s.call(s.nextXid(), wire.OpDelete, &wire.DeleteRequest{Path: "/zookeeper/" + r.name, Version: -1}, nil)
		s.close()
	}
	return &Trace{Target: tg.Name, Root: root, Lines: rankZxids(r.lines)}, nil
}

func (r *runner) add(format string, args ...any) {
	r.lines = append(r.lines, Line{Op: r.cur, Text: fmt.Sprintf(format, args...)})
}

func (r *runner) watch(s *session, who string) {
	s.onEvent = func(ev wire.WatcherEvent) {
		if r.tg.DropEvent != nil && r.tg.DropEvent(ev) {
			return
		}
		r.add("  %s event %s %s %s", who, eventName(ev.Type), stateName(ev.State), r.norm(ev.Path))
	}
}

// barrier asks every session a question whose reply comes after any
// notification the last op triggered for it (ZooKeeper queues a
// session's notifications and replies on one connection in order), so
// each event is attributed to the op that caused it.
func (r *runner) barrier() {
	for i, s := range r.sess {
		if s.broken {
			continue
		}
		if r.tg.Sync {
			h, _, err := s.call(s.nextXid(), wire.OpSync, &wire.PathRequest{Path: r.root}, nil)
			if err != nil || h.Err != wire.OK {
				r.add("  s%d barrier -> %s", i, result(h.Err, err))
			}
			continue
		}
		h, _, err := s.call(s.nextXid(), wire.OpExists, &wire.PathWatchRequest{Path: r.root + "/never"}, nil)
		if err != nil || h.Err != wire.ErrNoNode {
			r.add("  s%d barrier -> %s", i, result(h.Err, err))
		}
	}
}

func (r *runner) expand(p string) string {
	return strings.NewReplacer("{R}", r.root, "{N}", r.name, "{S}", r.lastSeq).Replace(p)
}

// norm turns the run's names back into the templates, so traces of runs
// under different roots compare equal.
func (r *runner) norm(p string) string {
	p = strings.ReplaceAll(p, "/zookeeper/"+r.name, "/zookeeper/{N}")
	if rest, ok := strings.CutPrefix(p, r.name); ok { // a relative path echoed back
		p = "{N}" + rest
	}
	return strings.ReplaceAll(p, r.root, "{R}")
}

func (r *runner) exec(o Op) {
	if !o.Scratch {
		r.add("  s%d -> %s", o.S, r.send(r.sess[o.S], o))
		return
	}
	s, err := dial(r.tg.Addrs[o.S%len(r.tg.Addrs)], sessionTimeout)
	if err != nil {
		r.add("  scratch connect: %v", err)
		return
	}
	defer s.close()
	r.owners[s.resp.SessionID] = "scratch"
	r.watch(s, "scratch")
	res := r.send(s, o)
	// Whether the server kept the connection after its answer: a ping
	// gets a reply on an open one. After UNIMPLEMENTED both close it, but
	// ZooKeeper may answer a ping sent at once before it does, so there
	// the connection is given time to close instead.
	after := "closed"
	switch {
	case s.broken:
	case strings.HasPrefix(res, "unimplemented"):
		if !s.closedWithin(closeWait) {
			after = "open"
		}
	default:
		if _, _, err := s.call(wire.XidPing, wire.OpPing, nil, nil); err == nil {
			after = "open"
		}
	}
	r.add("  scratch -> %s, then %s", res, after)
}

// send issues o on s and describes the reply.
func (r *runner) send(s *session, o Op) string {
	xid := s.nextXid()
	if o.Code == wire.OpAuth {
		xid = wire.XidAuth
	}
	var h wire.ReplyHeader
	var body []byte
	var err error
	if o.Raw != nil {
		h, body, err = s.call(xid, o.Code, nil, o.Raw)
	} else {
		h, body, err = s.call(xid, o.Code, r.request(o), nil)
	}
	if err != nil {
		return result(h.Err, err)
	}
	res := result(h.Err, nil)
	if len(body) == 0 {
		return res
	}
	rec, ok := wire.ResponseForOp(o.Code)
	if !ok || rec == nil {
		return fmt.Sprintf("%s body=%d bytes", res, len(body))
	}
	if err := rec.Decode(wire.NewDecoder(body)); err != nil {
		return fmt.Sprintf("%s undecodable body: %v", res, err)
	}
	if r.tg.TamperReply != nil {
		r.tg.TamperReply(o, rec)
	}
	if o.Code == wire.OpCreate || o.Code == wire.OpCreate2 {
		if o.Flags == wire.FlagPersistentSequential || o.Flags == wire.FlagEphemeralSequential {
			switch c := rec.(type) {
			case *wire.CreateResponse:
				r.lastSeq = c.Path
			case *wire.Create2Response:
				r.lastSeq = c.Path
			}
		}
	}
	return res + " " + r.describe(rec)
}

func (r *runner) request(o Op) wire.Record {
	p := r.expand(o.Path)
	switch o.Code {
	case wire.OpCreate, wire.OpCreate2, wire.OpCreateContainer:
		return &wire.CreateRequest{Path: p, Data: o.Data.bytes(), ACL: acls[o.ACL], Flags: o.Flags}
	case wire.OpCreateTTL:
		return &wire.CreateTTLRequest{Path: p, Data: o.Data.bytes(), ACL: acls[o.ACL], Flags: o.Flags, TTL: 60000}
	case wire.OpDelete:
		return &wire.DeleteRequest{Path: p, Version: o.Version}
	case wire.OpSetData:
		return &wire.SetDataRequest{Path: p, Data: o.Data.bytes(), Version: o.Version}
	case wire.OpExists, wire.OpGetData, wire.OpGetChildren, wire.OpGetChildren2:
		return &wire.PathWatchRequest{Path: p, Watch: o.Watch}
	case wire.OpSetACL:
		return &wire.SetACLRequest{Path: p, ACL: acls[o.ACL], Version: o.Version}
	case wire.OpCheck:
		return &wire.CheckVersionRequest{Path: p, Version: o.Version}
	case wire.OpAddWatch:
		return &wire.AddWatchRequest{Path: p, Mode: o.Mode}
	case wire.OpCheckWatches, wire.OpRemoveWatches:
		return &wire.RemoveWatchesRequest{Path: p, Type: o.Mode}
	case wire.OpAuth:
		scheme, cred, _ := strings.Cut(o.Auth, " ")
		return &wire.AuthPacket{Scheme: scheme, Auth: []byte(cred)}
	case wire.OpWhoAmI:
		return nil
	case wire.OpMulti, wire.OpMultiRead:
		m := &wire.MultiRequest{}
		for _, s := range o.Sub {
			m.Ops = append(m.Ops, wire.MultiOp{Type: s.Code, Path: r.expand(s.Path), Data: s.Data.bytes(),
				ACL: acls[s.ACL], Flags: s.Flags, Version: s.Version, TTL: 60000})
		}
		return m
	}
	// sync, getACL, getEphemerals, getAllChildrenNumber, and unknown
	// opcodes, which get a path for a body.
	return &wire.PathRequest{Path: p}
}

func result(c wire.Code, err error) string {
	if err != nil {
		return err.Error()
	}
	if c == wire.OK {
		return "OK"
	}
	return strings.TrimPrefix(c.Error(), "zk: ")
}

func (r *runner) describe(rec wire.Record) string {
	switch v := rec.(type) {
	case *wire.CreateResponse:
		return "path=" + r.norm(v.Path)
	case *wire.Create2Response:
		return "path=" + r.norm(v.Path) + " " + r.stat(v.Stat)
	case *wire.StatResponse:
		return r.stat(v.Stat)
	case *wire.GetDataResponse:
		if bytes.HasPrefix(v.Data, []byte("server.")) {
			// A dynamic configuration: the members' ports differ
			// between the targets, the form must not.
			return "data=" + strconv.Quote(configPorts.ReplaceAllString(string(v.Data), ":#")) + " " + r.stat(v.Stat)
		}
		return "data=" + dataString(v.Data) + " " + r.stat(v.Stat)
	case *wire.GetChildrenResponse:
		return "children=" + r.children(v.Children)
	case *wire.GetChildren2Response:
		return "children=" + r.children(v.Children) + " " + r.stat(v.Stat)
	case *wire.GetACLResponse:
		return "acl=" + aclString(v.ACL) + " " + r.stat(v.Stat)
	case *wire.SyncResponse:
		return "path=" + r.norm(v.Path)
	case *wire.GetEphemeralsResponse:
		return "ephemerals=" + r.children(v.Ephemerals)
	case *wire.GetAllChildrenNumberResponse:
		return "total=" + strconv.Itoa(int(v.TotalNumber))
	case *wire.WhoAmIResponse:
		var ids []string
		for _, c := range v.ClientInfo {
			ids = append(ids, c.AuthScheme+":"+c.User)
		}
		return fmt.Sprintf("whoami=%v", ids)
	case *wire.MultiResponse:
		var parts []string
		for _, res := range v.Results {
			p := opName(res.Type) + " " + result(res.Err, nil)
			switch res.Type {
			case wire.OpCreate:
				p += " path=" + r.norm(res.Path)
			case wire.OpCreate2, wire.OpCreateContainer, wire.OpCreateTTL:
				p += " path=" + r.norm(res.Path) + " " + r.stat(res.Stat)
			case wire.OpSetData:
				p += " " + r.stat(res.Stat)
			case wire.OpGetData:
				p += " data=" + dataString(res.Data) + " " + r.stat(res.Stat)
			case wire.OpGetChildren:
				p += " children=" + r.children(res.Children)
			}
			parts = append(parts, p)
		}
		return "[" + strings.Join(parts, "; ") + "]"
	}
	return fmt.Sprintf("%+v", rec)
}

// children sorts names (ZooKeeper promises no order) and leaves out the
// roots of other runs, which the listings of / and /zookeeper hold.
func (r *runner) children(names []string) string {
	if names == nil {
		return "null"
	}
	var out []string
	for _, n := range names {
		if strings.HasPrefix(n, "dt-") && n != r.name || strings.HasPrefix(n, "/dt-") && !strings.HasPrefix(n, r.root+"/") && n != r.root {
			continue
		}
		if n == r.name {
			n = "{N}"
		}
		out = append(out, r.norm(n))
	}
	slices.Sort(out)
	return "[" + strings.Join(out, " ") + "]"
}

func dataString(b []byte) string {
	switch {
	case b == nil:
		return "null"
	case len(b) == 0:
		return "empty"
	case len(b) > 64:
		return fmt.Sprintf("<%d bytes>", len(b))
	}
	return strconv.Quote(string(b))
}

// stat prints the fields that must agree exactly; zxids are written as
// markers that rankZxids replaces by their order, and the ephemeral
// owner as the session's ordinal.
func (r *runner) stat(s wire.Stat) string {
	owner, ok := r.owners[s.EphemeralOwner]
	if !ok {
		owner = "other"
	}
	if s.Czxid == 0 {
		// A node every run shares (/, /zookeeper): its children are the
		// runs' roots and what they made there, so their count, cversion
		// and pzxid tell of earlier runs, whose differences (a known one
		// may delete a root that was made a container) they carry on.
		// Of these only /zookeeper/config holds data, the members'
		// addresses, whose length differs between the targets.
		size := "0"
		if s.DataLength != 0 {
			size = "+"
		}
		return fmt.Sprintf("stat{v=%d cv=* av=%d len=%s nc=* owner=%s cz=0 mz=%s pz=*}",
			s.Version, s.Aversion, size, owner, zmark(s.Mzxid))
	}
	return fmt.Sprintf("stat{v=%d cv=%d av=%d len=%d nc=%d owner=%s cz=%s mz=%s pz=%s}",
		s.Version, s.Cversion, s.Aversion, s.DataLength, s.NumChildren, owner, zmark(s.Czxid), zmark(s.Mzxid), zmark(s.Pzxid))
}

func zmark(z int64) string { return "\x00" + strconv.FormatInt(z, 10) + "\x00" }

var zmarkRE = regexp.MustCompile("\x00(-?[0-9]+)\x00")

// configPorts are the ports of a dynamic configuration's lines.
var configPorts = regexp.MustCompile(`:[0-9]+`)

// rankZxids replaces zxids by labels that keep their order relations but
// not their values: the first new zxid of a run is z1, the next z2, and
// each new one says between which earlier ones it falls: "z3(>z1)" is
// above z1 and below every other zxid seen before it, "z4(<)" below all
// of them. Subsequent mentions are the bare label. Labels depend only on
// what came before in the trace, so the traces of two targets agree up
// to the first difference however they go on. Zero (the system nodes')
// stays 0.
func rankZxids(lines []Line) []Line {
	label := map[int64]string{}
	var seen []int64 // sorted
	for i := range lines {
		lines[i].Text = zmarkRE.ReplaceAllStringFunc(lines[i].Text, func(m string) string {
			z, _ := strconv.ParseInt(m[1:len(m)-1], 10, 64)
			if z == 0 {
				return "0"
			}
			if l, ok := label[z]; ok {
				return l
			}
			at, _ := slices.BinarySearch(seen, z)
			l := "z" + strconv.Itoa(len(label)+1)
			label[z] = l
			where := "(<)"
			if at > 0 {
				where = "(>" + label[seen[at-1]] + ")"
			}
			seen = slices.Insert(seen, at, z)
			return l + where
		})
	}
	return lines
}

func aclString(acl []wire.ACL) string {
	if acl == nil {
		return "null"
	}
	var parts []string
	for _, a := range acl {
		perms := ""
		for i, c := range "rwcda" {
			if a.Perms&(1<<i) != 0 {
				perms += string(c)
			}
		}
		if rest := a.Perms &^ wire.PermAll; rest != 0 {
			perms += fmt.Sprintf("+%#x", rest)
		}
		parts = append(parts, perms+":"+a.ID.Scheme+":"+a.ID.ID)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func eventName(t int32) string {
	switch t {
	case wire.EventNone:
		return "None"
	case wire.EventNodeCreated:
		return "NodeCreated"
	case wire.EventNodeDeleted:
		return "NodeDeleted"
	case wire.EventNodeDataChanged:
		return "NodeDataChanged"
	case wire.EventNodeChildrenChanged:
		return "NodeChildrenChanged"
	case wire.EventDataWatchRemoved:
		return "DataWatchRemoved"
	case wire.EventChildWatchRemoved:
		return "ChildWatchRemoved"
	case wire.EventPersistentWatchRemoved:
		return "PersistentWatchRemoved"
	}
	return fmt.Sprintf("type(%d)", t)
}

func stateName(s int32) string {
	switch s {
	case wire.StateSyncConnected:
		return "SyncConnected"
	case wire.StateDisconnected:
		return "Disconnected"
	case wire.StateExpired:
		return "Expired"
	case wire.StateAuthFailed:
		return "AuthFailed"
	case wire.StateClosed:
		return "Closed"
	}
	return fmt.Sprintf("state(%d)", s)
}
