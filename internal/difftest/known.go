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
		Match: touchesEmptiedContainer,
	},
	{
		ID: "watch-modes-on-one-path",
		Note: "A session's watches of different kinds on one path (one-shot, persistent, persistent recursive) " +
			"each fire as their own, as in ZooKeeper 3.9",
		Reason: "ZooKeeper 3.8 keeps one watch mode per path and session, so a second addWatch or a one-shot " +
			"watch on the same path replaces the first one's mode and events are lost or added; fixed in 3.9.0.",
		JIRA:  "ZOOKEEPER-4466",
		Match: mixesWatchModes,
	},
}

// mixesWatchModes reports whether, by the op where the traces part, one
// session had asked for watches of two kinds on one path, at least one of
// them persistent or persistent recursive: where ZooKeeper 3.8 keeps only
// one mode per path and session.
func mixesWatchModes(d Diff) bool {
	if d.At < 0 || d.At >= len(d.Ops) {
		return false
	}
	type key struct {
		s    int
		path string
	}
	kinds := map[key]map[string]bool{}
	note := func(o Op, kind string) {
		k := key{o.S, o.Path}
		if kinds[k] == nil {
			kinds[k] = map[string]bool{}
		}
		kinds[k][kind] = true
	}
	for _, o := range d.Ops[:d.At+1] {
		for _, s := range flatten(o) {
			s.S = o.S
			switch {
			case s.Code == wire.OpAddWatch && s.Mode == wire.AddWatchPersistent:
				note(s, "persistent")
			case s.Code == wire.OpAddWatch && s.Mode == wire.AddWatchPersistentRecursive:
				note(s, "recursive")
			case s.Watch && (s.Code == wire.OpGetData || s.Code == wire.OpExists):
				note(s, "data")
			case s.Watch && (s.Code == wire.OpGetChildren || s.Code == wire.OpGetChildren2):
				note(s, "child")
			}
		}
	}
	for _, ks := range kinds {
		if len(ks) >= 2 && (ks["persistent"] || ks["recursive"]) {
			return true
		}
	}
	return false
}

// op is the op at which the traces part.
func (d Diff) op() (Op, bool) {
	if d.At < 0 || d.At >= len(d.Ops) {
		return Op{}, false
	}
	return d.Ops[d.At], true
}

// touchesEmptiedContainer reports whether a difference can come from a
// container coordrun deleted at once: op at (or one of its multi
// operations) names a container that an earlier op created (successfully,
// on both targets), or its parent or a child, at or after an op that
// deleted a child of it on coordrun. (The difference may well be two
// errors, say BADVERSION against NONODE: the deletion itself shows
// nothing unless someone watches.)
func touchesEmptiedContainer(d Diff) bool {
	if d.At < 0 || d.At >= len(d.Ops) || d.ref == nil || d.test == nil {
		return false
	}
	containers := map[string]bool{}
	emptied := map[string]bool{}
	for i, o := range d.Ops[:d.At+1] {
		for _, s := range flatten(o) {
			switch {
			case isCreate(s.Code) && (s.Flags == wire.FlagContainer || s.Code == wire.OpCreateContainer):
				if succeeded(d.ref, i) && succeeded(d.test, i) {
					containers[s.Path] = true
				}
			case s.Code == wire.OpDelete && containers[path.Dir(s.Path)] && succeeded(d.test, i):
				emptied[path.Dir(s.Path)] = true
			}
		}
	}
	for _, s := range flatten(d.Ops[d.At]) {
		for c := range emptied {
			if s.Path == c || path.Dir(s.Path) == c || s.Path == path.Dir(c) {
				return true
			}
		}
	}
	return false
}

// succeeded reports whether op's reply in t was OK (for a multi: with
// every operation OK).
func succeeded(t *Trace, op int) bool {
	for _, l := range t.Lines {
		if l.Op != op {
			continue
		}
		if _, res, ok := strings.Cut(l.Text, " -> "); ok && !strings.Contains(l.Text, "barrier") {
			return strings.HasPrefix(res, "OK") && !strings.Contains(res, "[error")
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
