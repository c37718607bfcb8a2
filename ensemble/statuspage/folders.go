package statuspage

import (
	"sync"
	"time"
)

// folderCache keeps the names last read of the lock and cron roots, so
// that the broadcaster's read every second costs an Exists while neither
// folder changes. Anyone may create children under the lock root (its
// ACL is open by default), and reading even the first maxLocks of
// 200,000 visits all of them while writes wait.
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
	folders map[string]folderNames
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
	return &folderCache{folders: map[string]folderNames{}}
}

// sameChildren reports whether two stats of one path show the same
// children under the same ACL.
func sameChildren(a, b Stat) bool {
	return a.Czxid == b.Czxid && a.Pzxid == b.Pzxid && a.Cversion == b.Cversion &&
		a.Aversion == b.Aversion && a.NumChildren == b.NumChildren
}

// first is t.FirstChildren(p, n, nil), from the cache while p's children
// are unchanged (or for a while, when there are more than n); now is the
// time of the read. The caller must not modify the names. A nil cache
// reads the tree every time.
func (c *folderCache) first(t Tree, p string, n int, now time.Time) ([]string, Stat, error) {
	if c == nil {
		return t.FirstChildren(p, n, nil)
	}
	st, err := t.Exists(p)
	if err != nil {
		return nil, Stat{}, err
	}
	c.mu.Lock()
	f, ok := c.folders[p]
	c.mu.Unlock()
	switch {
	case !ok || f.n != n:
	case sameChildren(f.stat, st):
		return f.names, st, nil
	case f.stat.Czxid == st.Czxid && f.stat.Aversion == st.Aversion && int(f.stat.NumChildren) > n && int(st.NumChildren) > n &&
		now.Sub(f.at) < refreshLarge && now.Sub(f.at) >= 0:
		return f.names, st, nil
	}
	names, st, err := t.FirstChildren(p, n, nil)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		// Not kept: an error costs the tree nothing to say again.
		delete(c.folders, p)
		return nil, st, err
	}
	// The roots are two fixed paths: the map stays that small.
	c.folders[p] = folderNames{stat: st, at: now, n: n, names: names}
	return names, st, nil
}
