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
// transaction. A lone op is refused at once when it fails a check that
// needs no tree (ZooKeeper's PrepRequestProcessor makes those first). A
// multi's ops are checked in order by the tree, as ZooKeeper does, so an
// op refused on its own terms becomes an OpFail at its place and the ops
// before it may fail first; only a refusal of its first op is answered at
// once.
func PlanWrite(req *Request, s Session, lim Limits) Plan {
	p := Plan{op: req.Op}
	txn := &tree.Txn{Kind: tree.TxnOps, Session: s.ID, Auth: s.Auth, EnforceQuota: lim.EnforceQuota}
	if req.Op != wire.OpMulti {
		op, code, ok := planOp(req.Op, req.Path, req.Data, req.ACL, req.Flags, req.Version, lim, false)
		switch {
		case !ok:
			code = wire.ErrUnimplemented
		case code == wire.OK:
			code = CodeOf(tree.Precheck(&op))
		}
		// Data over the limit stays out of the log: ZooKeeper closes the
		// connection for such a frame, so no zxid is owed.
		if code != wire.OK && (!ok || len(req.Data) > lim.MaxData) {
			p.Early = code
			return p
		}
		if code != wire.OK {
			// ZooKeeper gives every write it reads a zxid, a refused one
			// too (its error txn), so later czxids count it: the refusal
			// goes through the log as a failing op.
			op = tree.Op{Kind: tree.OpFail, Path: req.Path, Fail: failureOf(code)}
		}
		txn.Ops = []tree.Op{op}
		p.Txn = txn
		return p
	}
	txn.Multi = true
	p.types = make([]int32, len(req.Ops))
	for i := range req.Ops {
		p.types[i] = multiResultType(req.Ops[i].Type, req.Ops[i].Flags)
		if t := req.Ops[i].Type; !isCreateOp(t) && t != wire.OpDelete && t != wire.OpSetData && t != wire.OpCheck {
			// ZooKeeper 3.8 cannot read a write multi holding a read
			// (or an op a multi does not take): the whole request
			// fails before any op is looked at.
			p.Early = wire.ErrMarshallingError
		}
	}
	if p.Early != wire.OK {
		return p
	}
	for i := range req.Ops {
		o := &req.Ops[i]
		op, code, _ := planOp(o.Type, o.Path, o.Data, o.ACL, o.Flags, o.Version, lim, true)
		if code == wire.OK {
			txn.Ops = append(txn.Ops, op)
			continue
		}
		// The ops after a refused one are never evaluated; the reply
		// makes them RuntimeInconsistency.
		if i == 0 {
			p.Early, p.earlyAt = code, 0
			return p
		}
		txn.Ops = append(txn.Ops, tree.Op{Kind: tree.OpFail, Path: o.Path, Fail: failureOf(code)})
		break
	}
	if len(txn.Ops) > 0 {
		p.Txn = txn
	}
	return p
}

// multiResultType is the opcode a multi's result for an op carries. As
// ZooKeeper 3.8 reads a multi, a create's opcode comes from its flags: a
// container is a createContainer whichever create opcode asked for it, and
// any other create (createContainer and createTTL included) a plain one.
func multiResultType(op, flags int32) int32 {
	if !isCreateOp(op) {
		return op
	}
	if flags == wire.FlagContainer {
		return wire.OpCreateContainer
	}
	if mode, ok := CreateMode(flags); ok && (mode == tree.ModePersistentTTL || mode == tree.ModePersistentSequentialTTL) {
		return wire.OpCreateTTL
	}
	return wire.OpCreate
}

func failureOf(c wire.Code) tree.Failure {
	switch c {
	case wire.ErrUnimplemented:
		return tree.FailUnimplemented
	case wire.ErrMarshallingError:
		return tree.FailUnreadable
	}
	return tree.FailBadArguments
}

func isCreateOp(op int32) bool {
	return op == wire.OpCreate || op == wire.OpCreate2 || op == wire.OpCreateContainer || op == wire.OpCreateTTL
}

// planOp turns one write into a tree op, with the refusal that needs no
// tree, if any: the opcode's and flags', and the data size. ok is false for
// an opcode that is not a write.
func planOp(op int32, path string, data []byte, acl []wire.ACL, flags, version int32, lim Limits, inMulti bool) (tree.Op, wire.Code, bool) {
	var code wire.Code
	if len(data) > lim.MaxData {
		code = wire.ErrBadArguments
	}
	var tacl []tree.ACL
	if acl != nil {
		tacl = TreeACLs(acl)
	}
	o := tree.Op{Path: path, Data: data, ACL: tacl, Version: version}
	switch op {
	case wire.OpCreate, wire.OpCreate2, wire.OpCreateContainer, wire.OpCreateTTL:
		o.Kind, o.Version = tree.OpCreate, 0
		var c wire.Code
		o.Mode, c = createCode(op, flags, inMulti)
		code = firstCode(c, code)
	case wire.OpDelete:
		o.Kind, o.Data = tree.OpDelete, nil
	case wire.OpSetData:
		o.Kind, o.ACL = tree.OpSetData, nil
	case wire.OpSetACL:
		o.Kind, o.Data = tree.OpSetACL, nil
	case wire.OpCheck:
		o.Kind, o.Data, o.ACL = tree.OpCheck, nil, nil
	default:
		return tree.Op{}, 0, false
	}
	return o, code, true
}

// createCode is a create's mode and the refusal its opcode and flags call
// for. Alone: a TTL opcode is unimplemented (TTL nodes are off, as on a
// default ZooKeeper) or, with a mode that is not a TTL one, a bad
// argument; unknown flags are bad arguments, and so is the container
// opcode with other flags. In a multi ZooKeeper 3.8 takes the opcode from
// the flags instead: a TTL mode is unimplemented from the TTL opcode and
// fails the whole multi (MARSHALLINGERROR) from any other, and the other
// opcodes' mismatches go unnoticed.
func createCode(op, flags int32, inMulti bool) (tree.Mode, wire.Code) {
	mode, ok := CreateMode(flags)
	if !ok {
		return mode, wire.ErrBadArguments
	}
	ttl := mode == tree.ModePersistentTTL || mode == tree.ModePersistentSequentialTTL
	switch {
	case inMulti && ttl && op != wire.OpCreateTTL:
		return mode, wire.ErrMarshallingError
	case ttl:
		return mode, wire.ErrUnimplemented
	case inMulti:
	case op == wire.OpCreateTTL:
		return mode, wire.ErrBadArguments
	case op == wire.OpCreateContainer && mode != tree.ModeContainer:
		return mode, wire.ErrBadArguments
	}
	return mode, wire.OK
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
	if p.op != wire.OpMulti || p.Early == wire.ErrMarshallingError {
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
	if op == wire.OpMulti && o.Err == wire.ErrMarshallingError {
		// ZooKeeper could not process it: the header says so, and
		// nothing follows.
		return o.Err
	}
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
		if o.Err != wire.OK {
			// The ops after a refused one never reached the tree.
			for range len(types) - len(mr.Results) {
				mr.Results = append(mr.Results, wire.MultiResult{Type: wire.OpError, Err: wire.ErrRuntimeInconsistency})
			}
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
