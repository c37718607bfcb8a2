package difftest

import (
	"path"
	"strings"

	"github.com/coordrun/coordrun/ensemble/wire"
)

// Known is a difference between coordrun and ZooKeeper 3.8 that is meant:
// either coordrun chose otherwise on purpose, or ZooKeeper 3.8 is wrong
// there (JIRA names the issue). Note is quoted from the README's
// Compatibility notes, which a test checks, so the table and the
// documentation cannot drift apart.
type Known struct {
	ID     string
	Note   string
	Reason string
	JIRA   string // "" when the difference is a choice rather than a ZooKeeper bug
	Match  func(Diff) bool
}

// KnownDifferences is the table the tester consults before it calls a
// difference a finding.
var KnownDifferences = []Known{
	{
		ID:   "oversized-data",
		Note: "Data larger than `--max-data-bytes` is refused with `BADARGUMENTS` and the connection stays usable",
		Reason: "ZooKeeper refuses a frame over jute.maxbuffer by closing the connection; coordrun's frame limit " +
			"leaves room for headers, so it can say what was wrong and keep the session's connection.",
		Match: func(d Diff) bool {
			o, ok := d.op()
			return ok && o.Scratch && o.Data.Kind == DataBig &&
				strings.Contains(d.Test, "bad arguments") && !strings.Contains(d.Ref, "bad arguments")
		},
	},
	{
		ID:   "container-deleted-at-once",
		Note: "An empty container node is deleted in the same write that removes its last child, rather than by a periodic sweep.",
		Reason: "ZooKeeper's ContainerManager sweeps empty containers once a minute by default, so within a " +
			"sequence the container is still there; coordrun deletes it in the write that empties it.",
		Match: func(d Diff) bool { return touchesEmptiedContainer(d.Ops, d.At) },
	},
}

// op is the op at which the traces part.
func (d Diff) op() (Op, bool) {
	if d.At < 0 || d.At >= len(d.Ops) {
		return Op{}, false
	}
	return d.Ops[d.At], true
}

// touchesEmptiedContainer reports whether op at (or one of its multi
// operations) names a container created earlier in ops, its parent or a
// child of it, after a delete that could have emptied it (at itself
// counts: the delete that empties a container is where the two part).
func touchesEmptiedContainer(ops []Op, at int) bool {
	if at < 0 || at >= len(ops) {
		return false
	}
	containers := map[string]bool{}
	emptied := map[string]bool{}
	for _, o := range ops[:at+1] {
		for _, s := range flatten(o) {
			switch {
			case isCreate(s.Code) && (s.Flags == wire.FlagContainer || s.Code == wire.OpCreateContainer):
				containers[s.Path] = true
			case s.Code == wire.OpDelete && containers[path.Dir(s.Path)]:
				emptied[path.Dir(s.Path)] = true
			}
		}
	}
	for _, s := range flatten(ops[at]) {
		for c := range emptied {
			if s.Path == c || path.Dir(s.Path) == c || s.Path == path.Dir(c) {
				return true
			}
		}
	}
	return false
}

func flatten(o Op) []Op {
	if o.Code == wire.OpMulti || o.Code == wire.OpMultiRead {
		return o.Sub
	}
	return []Op{o}
}

func isCreate(code int32) bool {
	return code == wire.OpCreate || code == wire.OpCreate2 || code == wire.OpCreateContainer || code == wire.OpCreateTTL
}
