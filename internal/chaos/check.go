package chaos

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/coordrun/coordrun/ensemble/tree"
	"github.com/coordrun/coordrun/ensemble/wire"
)

// Violation is one broken guarantee.
type Violation struct {
	Check  string
	Detail string
}

func (v Violation) String() string { return v.Check + ": " + v.Detail }

// register is the state of one znode for the linearizability model.
type register struct {
	Value   string
	Version int32
}

// RegisterModel is a znode as a register with a version: setData with
// version -1 always succeeds and bumps the version; with version v it
// succeeds iff the current version is v, else BadVersion; sync+getData
// returns value and version. Ops with an unknown outcome end at "infinity"
// (see Linearizable), so the model may apply them or place them after
// everything else, where they change nothing observed.
func RegisterModel(initial string) porcupine.Model {
	return porcupine.Model{
		Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
			byKey := map[string][]porcupine.Operation{}
			var keys []string
			for _, op := range history {
				k := op.Input.(Op).Key
				if _, ok := byKey[k]; !ok {
					keys = append(keys, k)
				}
				byKey[k] = append(byKey[k], op)
			}
			sort.Strings(keys)
			out := make([][]porcupine.Operation, 0, len(keys))
			for _, k := range keys {
				out = append(out, byKey[k])
			}
			return out
		},
		Init: func() interface{} { return register{Value: initial} },
		Step: func(st, in, _ interface{}) (bool, interface{}) {
			s := st.(register)
			op := in.(Op)
			switch op.Kind {
			case OpSyncGet:
				return op.Got == s.Value && op.Version == s.Version, s
			case OpSet:
				next := register{Value: op.Value, Version: s.Version + 1}
				if op.Outcome == Unknown {
					return true, next
				}
				return op.Version == next.Version, next
			case OpCAS:
				match := s.Version == op.Expect
				switch op.Outcome {
				case Unknown:
					if match {
						return true, register{Value: op.Value, Version: s.Version + 1}
					}
					return true, s
				case BadVersion:
					return !match, s
				default:
					return match && op.Version == s.Version+1, register{Value: op.Value, Version: s.Version + 1}
				}
			}
			return false, s
		},
		DescribeOperation: func(in, _ interface{}) string {
			op := in.(Op)
			switch op.Kind {
			case OpSyncGet:
				return fmt.Sprintf("s%d sync+get(%s) -> %q v%d", op.Session, op.Key, op.Got, op.Version)
			case OpSet:
				return fmt.Sprintf("s%d set(%s, %q) -> %s v%d", op.Session, op.Key, op.Value, op.Outcome, op.Version)
			default:
				return fmt.Sprintf("s%d cas(%s, %q, v%d) -> %s v%d", op.Session, op.Key, op.Value, op.Expect, op.Outcome, op.Version)
			}
		},
		DescribeState: func(st interface{}) string {
			s := st.(register)
			return fmt.Sprintf("%q v%d", s.Value, s.Version)
		},
	}
}

// linearizableOps is the part of a history the register model checks:
// writes whatever their outcome (definite failures excepted) and
// sync+reads that returned. A write whose outcome is unknown returns at
// the end of time.
func linearizableOps(h *History) []porcupine.Operation {
	var end int64
	for _, op := range h.Ops {
		end = max(end, op.Call, op.Return)
	}
	infinity := end + int64(time.Hour)
	var out []porcupine.Operation
	for _, op := range h.Ops {
		switch {
		case op.Kind == OpSyncGet && op.Outcome == OK:
		case (op.Kind == OpSet || op.Kind == OpCAS) && op.Outcome != Failed:
		default:
			continue
		}
		ret := op.Return
		if op.Outcome == Unknown {
			ret = infinity
		}
		out = append(out, porcupine.Operation{ClientId: op.Session, Input: op, Call: op.Call, Output: nil, Return: ret})
	}
	return out
}

// Linearizable checks writes and sync+reads against RegisterModel. The
// returned info feeds porcupine.VisualizePath.
func Linearizable(h *History, initial string, timeout time.Duration) ([]Violation, porcupine.Model, porcupine.LinearizationInfo) {
	model := RegisterModel(initial)
	ops := linearizableOps(h)
	res, info := porcupine.CheckOperationsVerbose(model, ops, timeout)
	switch res {
	case porcupine.Ok:
		return nil, model, info
	case porcupine.Unknown:
		// Not a violation, but not a pass either: say so loudly.
		return []Violation{{"linearizability", fmt.Sprintf("checker timed out after %s on %d ops", timeout, len(ops))}}, model, info
	}
	return []Violation{{"linearizability", fmt.Sprintf("history of %d writes and sync+reads is not linearizable", len(ops))}}, model, info
}

// SessionOrder checks per-session FIFO: replies come in request order, the
// zxids in reply headers and notifications never go down, a session never
// sees a node's version go down (monotonic reads), and sees its own writes.
func SessionOrder(h *History) []Violation {
	var out []Violation
	for _, s := range h.Sessions {
		var last int64
		for _, f := range s.Frames {
			if !f.Order {
				out = append(out, Violation{"session-fifo", fmt.Sprintf("session %d (0x%x): reply xid %d overtook an earlier request (frame %d)", s.N, s.ID, f.Xid, f.Seq)})
			}
			if f.Zxid <= 0 {
				continue
			}
			if f.Zxid < last {
				out = append(out, Violation{"session-fifo", fmt.Sprintf("session %d (0x%x): frame %d (xid %d) has zxid 0x%x after 0x%x", s.N, s.ID, f.Seq, f.Xid, f.Zxid, last)})
			}
			last = max(last, f.Zxid)
		}
	}
	bySession := map[int][]Op{}
	for _, op := range h.Ops {
		if op.Outcome == OK && op.Kind != OpCreate {
			bySession[op.Session] = append(bySession[op.Session], op)
		}
	}
	for n, ops := range bySession {
		sort.Slice(ops, func(i, j int) bool { return ops[i].Seq < ops[j].Seq })
		seen := map[string]Op{}
		for _, op := range ops {
			prev, ok := seen[op.Key]
			if ok && op.Version < prev.Version {
				what := "read"
				if prev.Kind == OpSet || prev.Kind == OpCAS {
					what = "own write"
				}
				out = append(out, Violation{"session-monotonic", fmt.Sprintf("session %d: %s of %s returned version %d after its %s saw version %d (reply %d, then %d)",
					n, op.Kind, op.Key, op.Version, what, prev.Version, prev.Seq, op.Seq)})
			}
			if !ok || op.Version >= prev.Version {
				seen[op.Key] = op
			}
		}
	}
	return out
}

// Watches checks one-shot watches per session: every notification answers
// a watch armed by an earlier reply and reports a change after that
// reply's zxid (so none fires twice or before the reply that set it), the
// event fits the watch, and for a session that survived, a watch whose
// path changed fired before the session's final sync+read of it.
// Notification zxid order is part of SessionOrder.
func Watches(h *History) []Violation {
	var out []Violation
	type item struct {
		seq   int
		arm   *Arm
		ev    *WatchEvent
		probe *Probe
	}
	items := map[int][]item{}
	for i := range h.Arms {
		a := &h.Arms[i]
		items[a.Session] = append(items[a.Session], item{seq: a.Seq, arm: a})
	}
	for i := range h.Probes {
		p := &h.Probes[i]
		items[p.Session] = append(items[p.Session], item{seq: p.Seq, probe: p})
	}
	survived := map[int]bool{}
	for _, s := range h.Sessions {
		survived[s.N] = s.Survived
		for i := range s.Events {
			items[s.N] = append(items[s.N], item{seq: s.Events[i].Seq, ev: &s.Events[i]})
		}
	}
	for n, its := range items {
		sort.SliceStable(its, func(i, j int) bool { return its[i].seq < its[j].seq })
		armed := map[string]*Arm{}
		for _, it := range its {
			switch {
			case it.arm != nil:
				if armed[it.arm.Path] == nil {
					armed[it.arm.Path] = it.arm
				}
			case it.ev != nil:
				ev := it.ev
				a := armed[ev.Path]
				if a == nil {
					out = append(out, Violation{"watch", fmt.Sprintf("session %d: event type %d for %s (zxid 0x%x, frame %d) without a watch armed before it (fired twice, or before the reply that set it)", n, ev.Type, ev.Path, ev.Zxid, ev.Seq)})
					continue
				}
				delete(armed, ev.Path)
				if ev.Zxid <= a.ReplyZxid {
					out = append(out, Violation{"watch", fmt.Sprintf("session %d: event for %s has zxid 0x%x, not after the reply that set the watch (0x%x)", n, ev.Path, ev.Zxid, a.ReplyZxid)})
				}
				okType := ev.Type == wire.EventNodeCreated
				if a.Kind == "data" {
					okType = ev.Type == wire.EventNodeDataChanged || ev.Type == wire.EventNodeDeleted
				}
				if !okType {
					out = append(out, Violation{"watch", fmt.Sprintf("session %d: %s watch on %s got event type %d", n, a.Kind, ev.Path, ev.Type)})
				}
			case it.probe != nil:
				p := it.probe
				a := armed[p.Path]
				if a != nil && survived[n] && p.Mzxid > a.ReplyZxid {
					out = append(out, Violation{"watch", fmt.Sprintf("session %d: watch on %s set at zxid 0x%x is lost: the node changed at 0x%x and no event came before the final read", n, p.Path, a.ReplyZxid, p.Mzxid)})
				}
			}
		}
	}
	return out
}

// Durable checks, on a tree read after every member was killed and
// restarted, that every acknowledged create exists and every register is
// at least at the version last acknowledged for it.
func Durable(t *tree.Tree, h *History) []Violation {
	var out []Violation
	for _, p := range h.Created {
		if _, err := t.Exists(p); err != nil {
			out = append(out, Violation{"durability", fmt.Sprintf("acknowledged create of %s is gone: %v", p, err)})
		}
	}
	acked := map[string]int32{}
	for _, op := range h.Ops {
		if (op.Kind == OpSet || op.Kind == OpCAS) && op.Outcome == OK {
			acked[op.Key] = max(acked[op.Key], op.Version)
		}
	}
	for k, v := range acked {
		st, err := t.Exists(k)
		if err != nil || st.Version < v {
			out = append(out, Violation{"durability", fmt.Sprintf("%s: version %d acknowledged, after restart %d (%v)", k, v, st.Version, err)})
		}
	}
	return out
}

// EphemeralsGone checks that no ephemeral node under dir remains: every
// session of the run has ended (closed or abandoned to expiry).
func EphemeralsGone(member int, t *tree.Tree, dir string) []Violation {
	kids, _, err := t.Children(dir, nil)
	if err != nil {
		return []Violation{{"ephemerals", fmt.Sprintf("member %d: %s: %v", member+1, dir, err)}}
	}
	if len(kids) == 0 {
		return nil
	}
	sort.Strings(kids)
	return []Violation{{"ephemerals", fmt.Sprintf("member %d: ephemerals of ended sessions remain: %s", member+1, strings.Join(kids, ", "))}}
}

// Trees runs the tree's own invariant check on each member's state and
// compares the members, which must have applied the same zxid.
func Trees(zxids []int64, trees []*tree.Tree) []Violation {
	var out []Violation
	for i, t := range trees {
		if err := t.Check(); err != nil {
			out = append(out, Violation{"tree", fmt.Sprintf("member %d at zxid 0x%x: %v", i+1, zxids[i], err)})
		}
	}
	for i := 1; i < len(trees); i++ {
		if zxids[i] != zxids[0] {
			out = append(out, Violation{"tree", fmt.Sprintf("members applied different zxids: %v", zxids)})
			break
		}
		if !trees[i].Equal(trees[0]) {
			out = append(out, Violation{"tree", fmt.Sprintf("member %d differs from member 1 at zxid 0x%x", i+1, zxids[0])})
		}
	}
	return out
}
