package ensemble

import (
	"errors"
	"math"

	"github.com/coordrun/coordrun/ensemble/tree"
	"github.com/coordrun/coordrun/ensemble/wire"
)

// codeOf maps the tree's errors to ZooKeeper's error codes. The tree knows
// nothing of the protocol; this table is the one place they meet.
func codeOf(err error) wire.Code {
	switch {
	case err == nil:
		return wire.OK
	case errors.Is(err, tree.ErrNoNode):
		return wire.ErrNoNode
	case errors.Is(err, tree.ErrNodeExists):
		return wire.ErrNodeExists
	case errors.Is(err, tree.ErrBadVersion):
		return wire.ErrBadVersion
	case errors.Is(err, tree.ErrNotEmpty):
		return wire.ErrNotEmpty
	case errors.Is(err, tree.ErrNoChildrenForEphemerals):
		return wire.ErrNoChildrenForEphemerals
	case errors.Is(err, tree.ErrNoAuth):
		return wire.ErrNoAuth
	case errors.Is(err, tree.ErrInvalidACL):
		return wire.ErrInvalidACL
	case errors.Is(err, tree.ErrBadArguments):
		return wire.ErrBadArguments
	case errors.Is(err, tree.ErrSessionExpired):
		return wire.ErrSessionExpired
	case errors.Is(err, tree.ErrRuntimeInconsistency):
		return wire.ErrRuntimeInconsistency
	case errors.Is(err, tree.ErrUnimplemented):
		return wire.ErrUnimplemented
	}
	var c wire.Code
	if errors.As(err, &c) {
		return c
	}
	return wire.ErrSystemError
}

func statOf(s tree.Stat) wire.Stat {
	if s.EphemeralOwner == math.MinInt64 {
		// Containers are marked internally with a reserved owner, but
		// ZooKeeper shows clients 0 for them.
		s.EphemeralOwner = 0
	}
	return wire.Stat{
		Czxid: s.Czxid, Mzxid: s.Mzxid, Ctime: s.Ctime, Mtime: s.Mtime,
		// The tree counts child creations (sequence numbers come from
		// that); clients see ZooKeeper's cversion, which also counts
		// deletions: creations*2 - children.
		Version: s.Version, Cversion: 2*s.Cversion - s.NumChildren, Aversion: s.Aversion,
		EphemeralOwner: s.EphemeralOwner, DataLength: s.DataLength,
		NumChildren: s.NumChildren, Pzxid: s.Pzxid,
	}
}

func aclsOf(a []tree.ACL) []wire.ACL {
	out := make([]wire.ACL, len(a))
	for i, x := range a {
		out[i] = wire.ACL{Perms: x.Perms, ID: wire.ID{Scheme: x.Scheme, ID: x.ID}}
	}
	return out
}

func treeACLs(a []wire.ACL) []tree.ACL {
	out := make([]tree.ACL, len(a))
	for i, x := range a {
		out[i] = tree.ACL{Perms: x.Perms, Scheme: x.ID.Scheme, ID: x.ID.ID}
	}
	return out
}

// outcome is a committed write's result in protocol terms. The leader
// sends it to the follower that forwarded the write, which encodes the
// reply itself: only it knows the request's exact opcodes.
type outcome struct {
	err     wire.Code
	ops     []opOutcome
	session int64
}

type opOutcome struct {
	err  wire.Code
	path string
	stat wire.Stat
}

func outcomeOf(res *tree.Result) outcome {
	o := outcome{err: codeOf(res.Err), session: res.SessionID, ops: make([]opOutcome, len(res.Ops))}
	for i, r := range res.Ops {
		o.ops[i] = opOutcome{err: codeOf(r.Err), path: r.Path, stat: statOf(r.Stat)}
	}
	return o
}

func (o *outcome) encode(e *wire.Encoder) {
	e.Int(int32(o.err))
	e.Long(o.session)
	e.Int(int32(len(o.ops)))
	for i := range o.ops {
		e.Int(int32(o.ops[i].err))
		e.String(o.ops[i].path)
		o.ops[i].stat.Encode(e)
	}
}

func (o *outcome) decode(d *wire.Decoder) error {
	o.err = wire.Code(d.Int())
	o.session = d.Long()
	n := d.Int()
	if n < 0 || int(n) > d.Remaining()/4 {
		return wire.ErrMalformed
	}
	o.ops = make([]opOutcome, n)
	for i := range o.ops {
		o.ops[i].err = wire.Code(d.Int())
		o.ops[i].path = d.String()
		_ = o.ops[i].stat.Decode(d)
	}
	return d.Err()
}

// appendWriteReply appends the body of a committed write's reply and
// returns its header code. types holds the opcode of each op of a multi.
func appendWriteReply(e *wire.Encoder, op int32, types []int32, o *outcome) wire.Code {
	if op == wire.OpMulti {
		// A failed multi still answers OK in the header; each op's
		// outcome is in the body, as ZooKeeper does.
		var mr wire.MultiResponse
		for i, r := range o.ops {
			if o.err != wire.OK {
				mr.Results = append(mr.Results, wire.MultiResult{Type: wire.OpError, Err: r.err})
				continue
			}
			t := types[i]
			if t == wire.OpCreate2 {
				// ZooKeeper answers a create2 inside a multi as a plain
				// create (path only); clients expect exactly that.
				t = wire.OpCreate
			}
			mr.Results = append(mr.Results, wire.MultiResult{Type: t, Path: r.path, Stat: r.stat})
		}
		mr.Encode(e)
		return wire.OK
	}
	if o.err != wire.OK {
		return o.err
	}
	if len(o.ops) == 0 {
		return wire.OK
	}
	r := o.ops[0]
	switch op {
	case wire.OpCreate:
		(&wire.CreateResponse{Path: r.path}).Encode(e)
	case wire.OpCreate2, wire.OpCreateContainer, wire.OpCreateTTL:
		(&wire.Create2Response{Path: r.path, Stat: r.stat}).Encode(e)
	case wire.OpSetData, wire.OpSetACL:
		(&wire.StatResponse{Stat: r.stat}).Encode(e)
	}
	return wire.OK
}
