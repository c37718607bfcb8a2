package zk

import (
	"github.com/coordrun/coordrun/ensemble/tree"
	"github.com/coordrun/coordrun/ensemble/wire"
)

// Growth is at most how much txn grows the tree: the znodes it creates
// and the bytes of path and data it adds (a setData counts its new data
// whole: what it replaces is not known before the tree applies it). at is
// the first op that grows it, -1 for none.
func Growth(txn *tree.Txn) (nodes int, bytes int64, at int) {
	at = -1
	for i, op := range txn.Ops {
		switch op.Kind {
		case tree.OpCreate:
			nodes++
			bytes += int64(len(op.Path) + len(op.Data))
		case tree.OpSetData:
			bytes += int64(len(op.Data))
		default:
			continue
		}
		if at < 0 {
			at = i
		}
	}
	return nodes, bytes, at
}

// Refuse makes p a refusal with code at op at (0 for a lone op), answered
// at once without the log.
func (p *Plan) Refuse(code wire.Code, at int) {
	p.Early, p.earlyAt, p.Txn = code, max(at, 0), nil
}
