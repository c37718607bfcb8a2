package statuspage

import (
	"strings"
	"sync"
	"time"
)

// folderCache keeps the names last read of the folders the page lists
// (the lock and cron roots, each lock's queue, each job's hosts and
// firings), so that the broadcaster's read every second costs an Exists
// per folder while none changes. Anyone may create children under the
// lock root (its ACL is open by default), and reading even the first
// maxLocks of 200,000 visits all of them while writes wait.
//
// An entry holds while the folder's stat says its children and its ACL
// are as they were: a child's create or delete moves the parent's pzxid
// (and a create its cversion), a setACL its aversion, and a folder
// deleted and made again has another czxid. The stat is replicated state,
// so it tells the same of a tree restored from a snapshot.
//
// A folder with more children than are shown is cut off anyway, and
// someone who keeps changing it would make every read visit them all: its
// names are read again at most every refreshLarge, the count at once.
// Not so after a setACL: names are never shown past an ACL that may now
// hide them.
type folderCache struct {
	mu      sync.Mutex // guards folders
	folders map[folderKey]folderNames
}

type folderKey struct {
	path  string
	order order
}

// maxFolders bounds the cache: the roots, and a folder or two of each
// lock and job shown. Past it (the folders read changed: locks and jobs
// came and went) it starts afresh.
const maxFolders = 2 + maxLocks + 2*maxJobs + 100

// order is an order of a folder's names.
type order int

const (
	byName      order = iota
	byQueue           // a lock's queue: queueOrder
	latestFirst       // names descending: a job's newest firings first
)

func (o order) cmp() func(a, b string) int {
	switch o {
	case byQueue:
		return queueOrder
	case latestFirst:
		return func(a, b string) int { return strings.Compare(b, a) }
	}
	return nil
}

// folders reads folder names for one build of a view, at now, through a
// cache (nil: straight from the tree).
type folders struct {
	c   *folderCache
	now time.Time
}

func (f folders) first(t Tree, p string, n int, o order) ([]string, Stat, error) {
	return f.c.first(t, p, n, o, f.now)
}

type folderNames struct {
	stat  Stat
	at    time.Time // when the names were read
	n     int
	names []string // shared by every reader: never modified
}

// refreshLarge is how long the names of a folder with more children than
// are shown may be kept while it changes.
const refreshLarge = 5 * time.Second

func newFolderCache() *folderCache {
	return &folderCache{folders: map[folderKey]folderNames{}}
}

// sameChildren reports whether two stats of one path show the same
// children under the same ACL.
func sameChildren(a, b Stat) bool {
	return a.Czxid == b.Czxid && a.Pzxid == b.Pzxid && a.Cversion == b.Cversion &&
		a.Aversion == b.Aversion && a.NumChildren == b.NumChildren
}

// first is t.FirstChildren(p, n, o.cmp()), from the cache while p's
// children are unchanged (or for a while, when there are more than n);
// now is the time of the read. The caller must not modify the names. A
// nil cache reads the tree every time.
func (c *folderCache) first(t Tree, p string, n int, o order, now time.Time) ([]string, Stat, error) {
	if c == nil {
		return t.FirstChildren(p, n, o.cmp())
	}
	st, err := t.Exists(p)
	if err != nil {
		return nil, Stat{}, err
	}
	key := folderKey{p, o}
	c.mu.Lock()
	f, ok := c.folders[key]
	c.mu.Unlock()
	switch {
	case !ok || f.n != n:
	case sameChildren(f.stat, st):
		return f.names, st, nil
	case f.stat.Czxid == st.Czxid && f.stat.Aversion == st.Aversion && int(f.stat.NumChildren) > n && int(st.NumChildren) > n &&
		now.Sub(f.at) < refreshLarge && now.Sub(f.at) >= 0:
		return f.names, st, nil
	}
	names, st, err := t.FirstChildren(p, n, o.cmp())
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		// Not kept: an error costs the tree nothing to say again.
		delete(c.folders, key)
		return nil, st, err
	}
	if len(c.folders) >= maxFolders {
		clear(c.folders)
	}
	c.folders[key] = folderNames{stat: st, at: now, n: n, names: names}
	return names, st, nil
}
