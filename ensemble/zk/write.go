package zk

import (
	"github.com/coordrun/coordrun/ensemble/tree"
	"github.com/coordrun/coordrun/ensemble/wire"
)

// Plan is a write as the member handles it: the transaction to commit and
// what the reply to it needs.
type Plan struct {
	// Txn is the transaction to propose. It is nil for a request answered
	// at once, without raft: one that cannot succeed (Early says why) or
	// an empty multi, which changes nothing. Answer replies to those.
	Txn *tree.Txn
	// Early is the error code of a request refused before the tree was
	// consulted; OK otherwise.
	Early wire.Code

	op      int32
	types   []int32 // multi: the opcode of each op, in order
	earlyAt int     // multi: the op Early belongs to
}

// PlanWrite validates a write request of session s and turns it into a
// transaction. Checks that need no tree come first, as in ZooKeeper's
// PrepRequestProcessor; a multi fails as a whole on the first bad op.
func PlanWrite(req *Request, s Session, lim Limits) Plan {
	p := Plan{op: req.Op}
	txn := &tree.Txn{Kind: tree.TxnOps, Session: s.ID, Auth: s.Auth}
	var code wire.Code
	switch req.Op {
	case wire.OpMulti:
		txn.Multi = true
		p.types = make([]int32, 0, len(req.Ops))
		for i := range req.Ops {
			o := &req.Ops[i]
			c, ok := wire.ErrBadArguments, false
			if o.Type != wire.OpSetACL {
				c, ok = addOp(txn, o.Type, o.Path, o.Data, o.ACL, o.Flags, o.Version, lim)
			}
			if !ok {
				// A read, or a setACL, inside a write multi is a
				// malformed request.
				c = wire.ErrBadArguments
				txn.Ops = append(txn.Ops, tree.Op{})
			}
			if c != wire.OK && code == wire.OK {
				p.earlyAt = i
			}
			code = firstCode(code, c)
			t := o.Type
			if isCreateOp(t) && o.Flags == wire.FlagContainer {
				// A container, whichever create opcode asked for it, is
				// a createContainer txn on ZooKeeper, and answered so.
				t = wire.OpCreateContainer
			}
			p.types = append(p.types, t)
		}
	default:
		var ok bool
		if code, ok = addOp(txn, req.Op, req.Path, req.Data, req.ACL, req.Flags, req.Version, lim); !ok {
			code = wire.ErrUnimplemented
		}
	}
	switch {
	case code != wire.OK:
		p.Early = code
	case req.Op != wire.OpMulti || len(txn.Ops) > 0:
		p.Txn = txn
	}
	return p
}

func isCreateOp(op int32) bool {
	return op == wire.OpCreate || op == wire.OpCreate2 || op == wire.OpCreateContainer || op == wire.OpCreateTTL
}

// addOp appends the op of a write request and returns its early error;
// for an opcode that is not a write it appends nothing and returns false.
func addOp(txn *tree.Txn, op int32, path string, data []byte, acl []wire.ACL, flags, version int32, lim Limits) (wire.Code, bool) {
	switch op {
	case wire.OpCreate, wire.OpCreate2, wire.OpCreateContainer, wire.OpCreateTTL:
		return addCreate(txn, op, path, data, acl, flags, lim), true
	case wire.OpDelete:
		return addPathOp(txn, tree.OpDelete, path, nil, version, nil, lim), true
	case wire.OpSetData:
		return addPathOp(txn, tree.OpSetData, path, data, version, nil, lim), true
	case wire.OpSetACL:
		return addPathOp(txn, tree.OpSetACL, path, nil, version, acl, lim), true
	case wire.OpCheck:
		return addPathOp(txn, tree.OpCheck, path, nil, version, nil, lim), true
	}
	return 0, false
}

// addCreate appends a create op. Precedence: a TTL opcode (TTL nodes are
// off, as on a default ZooKeeper; with a mode that is not a TTL one it is a
// bad argument, as ZooKeeper's TTL check says before it gets that far),
// the flags, the mode and path as the tree checks them, the container
// opcode's mode, the data size.
func addCreate(txn *tree.Txn, op int32, path string, data []byte, acl []wire.ACL, flags int32, lim Limits) wire.Code {
	var code wire.Code
	if op == wire.OpCreateTTL {
		code = wire.ErrBadArguments
		if flags == wire.FlagPersistentWithTTL || flags == wire.FlagPersistentSequentialWithTTL {
			code = wire.ErrUnimplemented
		}
	}
	mode, ok := CreateMode(flags)
	if ok {
		code = firstCode(code, CodeOf(tree.CheckCreate(mode, path)))
	} else {
		code = firstCode(code, wire.ErrBadArguments)
	}
	if op == wire.OpCreateContainer && flags != wire.FlagContainer {
		code = firstCode(code, wire.ErrBadArguments)
	}
	if len(data) > lim.MaxData {
		code = firstCode(code, wire.ErrBadArguments)
	}
	txn.Ops = append(txn.Ops, tree.Op{Kind: tree.OpCreate, Path: path, Data: data, ACL: TreeACLs(acl), Mode: mode})
	return code
}

// addPathOp appends an op on an existing node; acl is set only for setACL.
func addPathOp(txn *tree.Txn, kind tree.OpKind, path string, data []byte, version int32, acl []wire.ACL, lim Limits) wire.Code {
	var code wire.Code
	if tree.ValidatePath(path, false) != nil || len(data) > lim.MaxData {
		code = wire.ErrBadArguments
	}
	var tacl []tree.ACL
	if acl != nil {
		tacl = TreeACLs(acl)
	}
	txn.Ops = append(txn.Ops, tree.Op{Kind: kind, Path: path, Data: data, Version: version, ACL: tacl})
	return code
}

func firstCode(have, c wire.Code) wire.Code {
	if have != wire.OK {
		return have
	}
	return c
}

// Answer is the reply to a plan without a transaction. A refused multi
// answers OK in the header with the refusal in its first result and
// RuntimeInconsistency in the others; any other refused write answers the
// code in the header.
func (p *Plan) Answer(xid int32, zxid int64) []byte {
	if p.op != wire.OpMulti {
		return ErrorReply(xid, zxid, p.Early)
	}
	// As ZooKeeper answers a multi that fails: the ops before the failing
	// one OK (as error results), the failing one its code, the rest
	// RUNTIMEINCONSISTENCY.
	o := Outcome{Err: p.Early, Ops: make([]OpOutcome, len(p.types))}
	if p.Early != wire.OK {
		for i := range o.Ops {
			if i > p.earlyAt {
				o.Ops[i].Err = wire.ErrRuntimeInconsistency
			}
		}
		if p.earlyAt < len(o.Ops) {
			o.Ops[p.earlyAt].Err = p.Early
		}
	}
	return p.Reply(xid, zxid, &o)
}

// Reply is the reply to the plan's committed transaction, whose outcome is
// o and whose zxid is zxid.
func (p *Plan) Reply(xid int32, zxid int64, o *Outcome) []byte {
	return reply(xid, zxid, func(e *wire.Encoder) wire.Code {
		return appendWriteReply(e, p.op, p.types, o)
	})
}

// appendWriteReply appends the body of a committed write's reply and
// returns its header code. types holds the opcode of each op of a multi.
func appendWriteReply(e *wire.Encoder, op int32, types []int32, o *Outcome) wire.Code {
	if op == wire.OpMulti {
		// A failed multi still answers OK in the header; each op's
		// outcome is in the body, as ZooKeeper does.
		var mr wire.MultiResponse
		for i, r := range o.Ops {
			if o.Err != wire.OK || i >= len(types) {
				mr.Results = append(mr.Results, wire.MultiResult{Type: wire.OpError, Err: r.Err})
				continue
			}
			t := types[i]
			switch t {
			case wire.OpCreate2:
				// ZooKeeper answers a create2 inside a multi as a plain
				// create (path only); clients expect exactly that.
				t = wire.OpCreate
			case wire.OpCreateContainer:
				// A container's result is a create2 one: path and stat.
				t = wire.OpCreate2
			}
			mr.Results = append(mr.Results, wire.MultiResult{Type: t, Path: r.Path, Stat: r.Stat})
		}
		mr.Encode(e)
		return wire.OK
	}
	if o.Err != wire.OK {
		return o.Err
	}
	if len(o.Ops) == 0 {
		return wire.OK
	}
	r := o.Ops[0]
	switch op {
	case wire.OpCreate:
		(&wire.CreateResponse{Path: r.Path}).Encode(e)
	case wire.OpCreate2, wire.OpCreateContainer, wire.OpCreateTTL:
		(&wire.Create2Response{Path: r.Path, Stat: r.Stat}).Encode(e)
	case wire.OpSetData, wire.OpSetACL:
		(&wire.StatResponse{Stat: r.Stat}).Encode(e)
	}
	return wire.OK
}

// Outcome is a committed write's result in protocol terms. The leader
// sends it to the member that forwarded the write, which builds the reply
// itself: only it knows the request's opcodes.
type Outcome struct {
	Err     wire.Code
	Session int64 // createSession: the new session's id
	Ops     []OpOutcome
}

// OpOutcome is one op's part of an Outcome.
type OpOutcome struct {
	Err  wire.Code
	Path string // create: the node created
	Stat wire.Stat
}

// OutcomeOf translates a transaction's result.
func OutcomeOf(res *tree.Result) Outcome {
	o := Outcome{Err: CodeOf(res.Err), Session: res.SessionID, Ops: make([]OpOutcome, len(res.Ops))}
	for i, r := range res.Ops {
		o.Ops[i] = OpOutcome{Err: CodeOf(r.Err), Path: r.Path, Stat: StatOf(r.Stat)}
	}
	return o
}

// Encode writes the outcome as the leader sends it to a forwarding member.
func (o *Outcome) Encode(e *wire.Encoder) {
	e.Int(int32(o.Err))
	e.Long(o.Session)
	e.Int(int32(len(o.Ops)))
	for i := range o.Ops {
		e.Int(int32(o.Ops[i].Err))
		e.String(o.Ops[i].Path)
		o.Ops[i].Stat.Encode(e)
	}
}

// Decode reads an outcome written by Encode.
func (o *Outcome) Decode(d *wire.Decoder) error {
	o.Err = wire.Code(d.Int())
	o.Session = d.Long()
	n := d.Int()
	if n < 0 || int(n) > d.Remaining()/4 {
		return wire.ErrMalformed
	}
	o.Ops = make([]OpOutcome, n)
	for i := range o.Ops {
		o.Ops[i].Err = wire.Code(d.Int())
		o.Ops[i].Path = d.String()
		_ = o.Ops[i].Stat.Decode(d)
	}
	return d.Err()
}
