package difftest

import (
	"path"
	"strings"

	"github.com/coordrun/coordrun/ensemble/wire"
)

// Known is a difference between coordrun and ZooKeeper 3.8 that is meant:
// either coordrun chose otherwise on purpose, or ZooKeeper 3.8 is wrong
// there (JIRA names the issue). Note is quoted from docs/compatibility.md's
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
	{
		ID:   "check-watches-of-others",
		Note: "`checkWatches` reports only the asking session's own watches, as in ZooKeeper 3.9",
		Reason: "ZooKeeper 3.8 answers OK when any session watches the path, and fails to process a path " +
			"without a leading slash (MARSHALLINGERROR) once a recursive watch exists; its watch manager was " +
			"rewritten for 3.9.0.",
		JIRA:  "ZOOKEEPER-4466",
		Match: checksOthersWatch,
	},
	{
		ID: "remove-persistent-as-data",
		Note: "`removeWatches` of the data or children type leaves a persistent watch in place, " +
			"as in ZooKeeper 3.9",
		Reason: "ZooKeeper 3.8 removes a persistent or recursive watch, or part of it, when asked to remove a " +
			"data or child watch of the path; fixed in 3.9.0.",
		JIRA:  "ZOOKEEPER-4471",
		Match: removesPersistentAsData,
	},
}

// armed lists, for each path, the sessions that asked for a watch on it
// before op at, and which kinds.
func armed(ops []Op, at int) map[string]map[int]map[string]bool {
	out := map[string]map[int]map[string]bool{}
	for _, o := range ops[:at] {
		for _, s := range flatten(o) {
			kind := ""
			switch {
			case s.Code == wire.OpAddWatch && s.Mode == wire.AddWatchPersistent:
				kind = "persistent"
			case s.Code == wire.OpAddWatch && s.Mode == wire.AddWatchPersistentRecursive:
				kind = "recursive"
			case s.Watch:
				kind = "one-shot"
			default:
				continue
			}
			if out[s.Path] == nil {
				out[s.Path] = map[int]map[string]bool{}
			}
			if out[s.Path][o.S] == nil {
				out[s.Path][o.S] = map[string]bool{}
			}
			out[s.Path][o.S][kind] = true
		}
	}
	return out
}

// checksOthersWatch reports whether the difference is a checkWatches that
// coordrun answers NOWATCHER where ZooKeeper 3.8 looked at other sessions'
// watches: OK with some session's watch on the path or above it, or
// MARSHALLINGERROR for a path without a leading slash while someone
// watches recursively.
func checksOthersWatch(d Diff) bool {
	o, ok := d.op()
	if !ok || o.Code != wire.OpCheckWatches || !strings.Contains(d.Test, "no such watcher") {
		return false
	}
	w := armed(d.Ops, d.At)
	switch {
	case strings.HasSuffix(d.Ref, "-> OK"):
		for p := range w {
			if p == o.Path || strings.HasPrefix(o.Path, p+"/") {
				return true
			}
		}
	case strings.Contains(d.Ref, "marshalling error") && !strings.HasPrefix(o.Path, "/") && !strings.HasPrefix(o.Path, "{R}"):
		for _, sessions := range w {
			for _, kinds := range sessions {
				if kinds["recursive"] {
					return true
				}
			}
		}
	}
	return false
}

// removesPersistentAsData reports whether the difference is a
// removeWatches of the data or children type that ZooKeeper 3.8 answers
// OK and coordrun NOWATCHER, by a session that had a persistent or
// recursive watch on the path.
func removesPersistentAsData(d Diff) bool {
	o, ok := d.op()
	if !ok || o.Code != wire.OpRemoveWatches || (o.Mode != wire.WatcherData && o.Mode != wire.WatcherChildren) ||
		!strings.HasSuffix(d.Ref, "-> OK") || !strings.Contains(d.Test, "no such watcher") {
		return false
	}
	kinds := armed(d.Ops, d.At)[o.Path][o.S]
	return kinds["persistent"] || kinds["recursive"]
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
	parents := map[string]string{} // a container's parent, as a template
	emptied := map[string]bool{}
	for i, o := range d.Ops[:d.At+1] {
		for _, s := range flatten(o) {
			switch {
			case isCreate(s.Code) && (s.Flags == wire.FlagContainer || s.Code == wire.OpCreateContainer):
				if succeeded(d.ref, i) && succeeded(d.test, i) {
					containers[s.Path] = true
					// {S} names a node made at run time: its parent
					// is the one of the path the create made.
					parents[s.Path] = path.Dir(s.Path)
					if p := createdPath(d.ref, i); p != "" && s.Path == "{S}" {
						parents[s.Path] = path.Dir(p)
					}
				}
			case s.Code == wire.OpDelete && containers[path.Dir(s.Path)] && succeeded(d.test, i):
				emptied[path.Dir(s.Path)] = true
			}
		}
	}
	for _, s := range flatten(d.Ops[d.At]) {
		for c := range emptied {
			if s.Path == c || path.Dir(s.Path) == c || s.Path == parents[c] {
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

// createdPath is the path a lone create at op made in t, or "".
func createdPath(t *Trace, op int) string {
	for _, l := range t.Lines {
		if l.Op != op {
			continue
		}
		if _, rest, ok := strings.Cut(l.Text, " -> OK path="); ok {
			p, _, _ := strings.Cut(rest, " ")
			return p
		}
	}
	return ""
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
