package tree

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// ZooKeeper's per-subtree quotas, as 3.8 keeps them. A client (zkCli's
// setquota) marks path P by creating /zookeeper/quota/P/zookeeper_limits,
// whose data holds the limits, and /zookeeper/quota/P/zookeeper_stats,
// whose data the tree keeps equal to P's subtree's node count and data
// bytes. Both are plain znodes holding StatsTrack text
// ("count=3,bytes=12"); the tree only reads and rewrites their data, so a
// snapshot needs nothing beyond the nodes, and one without quotas loads
// as before.
const (
	QuotaLimitNode = "zookeeper_limits"
	QuotaStatNode  = "zookeeper_stats"
)

// QuotaStats is StatsTrack: the keys of a limits or stats node's data.
// Missing keys read as -1, as in ZooKeeper.
type QuotaStats map[string]int64

// The keys ZooKeeper 3.8 writes: soft limits (and, in a stats node, the
// current values) under count and bytes, hard limits under the others.
const (
	QuotaCount          = "count"
	QuotaBytes          = "bytes"
	QuotaCountHardLimit = "countHardLimit"
	QuotaByteHardLimit  = "byteHardLimit"
)

// ParseQuotaStats reads StatsTrack text: key=value pairs split by runs of
// ',' and ';', a value left empty meaning -1 ("bytes=5=" is bytes 5, the
// trailing '=' is how ZooKeeper hides newer keys from older parsers).
// ok is false where ZooKeeper's parser would throw.
func ParseQuotaStats(b []byte) (QuotaStats, bool) {
	s := QuotaStats{}
	for _, pair := range strings.FieldsFunc(string(b), func(r rune) bool { return r == ',' || r == ';' }) {
		// Java's split("=") drops trailing empty fields.
		kv := strings.Split(pair, "=")
		for len(kv) > 0 && kv[len(kv)-1] == "" {
			kv = kv[:len(kv)-1]
		}
		if len(kv) < 2 {
			if len(kv) == 1 && strings.HasSuffix(pair, "=") {
				s[kv[0]] = -1
				continue
			}
			return nil, false
		}
		v, err := strconv.ParseInt(kv[1], 10, 64)
		if err != nil {
			return nil, false
		}
		s[kv[0]] = v
	}
	return s, true
}

// Get is the value of key, -1 when absent.
func (s QuotaStats) Get(key string) int64 {
	if v, ok := s[key]; ok {
		return v
	}
	return -1
}

// Bytes is StatsTrack.toString: count and bytes first, then, after an '='
// that older parsers skip, the other keys sorted, each after a ';'.
func (s QuotaStats) Bytes() []byte {
	b := []byte(QuotaCount + "=")
	b = strconv.AppendInt(b, s.Get(QuotaCount), 10)
	b = append(b, ","+QuotaBytes+"="...)
	b = strconv.AppendInt(b, s.Get(QuotaBytes), 10)
	var rest []string
	for k := range s {
		if k != QuotaCount && k != QuotaBytes {
			rest = append(rest, k)
		}
	}
	if len(rest) == 0 {
		return b
	}
	slices.Sort(rest)
	b = append(b, '=')
	for _, k := range rest {
		b = append(b, ';')
		b = append(b, k...)
		b = append(b, '=')
		b = strconv.AppendInt(b, s[k], 10)
	}
	return b
}

// quotaOf is the path a limits node at path marks, or false. As in
// ZooKeeper's DataTree, a node named zookeeper_limits anywhere below
// /zookeeper/quota marks the path its parent stands for.
func quotaOf(path string) (string, bool) {
	parent, name := splitPath(path)
	if name != QuotaLimitNode || !strings.HasPrefix(parent, quotaPath+"/") {
		return "", false
	}
	return parent[len(quotaPath):], true
}

// quotaPrefix is the deepest marked path that is path or an ancestor of
// it, ZooKeeper's getMaxPrefixWithQuota.
func (t *Tree) quotaPrefix(path string) (string, bool) {
	if len(t.quotas) == 0 {
		return "", false
	}
	for p := path; ; {
		if _, ok := t.quotas[p]; ok {
			return p, true
		}
		parent, ok := parentOf(p)
		if !ok || parent == p || parent == rootPath {
			return "", false
		}
		p = parent
	}
}

func quotaStatPath(prefix string) string  { return quotaPath + prefix + "/" + QuotaStatNode }
func quotaLimitPath(prefix string) string { return quotaPath + prefix + "/" + QuotaLimitNode }

// quotaCreated follows DataTree.createNode's tail: a new limits node marks
// its path, a new stats node is filled with its path's counts, and the
// stats of the quota path above the new node count it.
func (t *Tree) quotaCreated(path string, n *node) {
	// What the create wrote counts, even where the stats below replace it.
	size := int64(len(n.data))
	if q, ok := quotaOf(path); ok {
		t.quotas[q] = struct{}{}
		t.record(func() { delete(t.quotas, q) })
	}
	if parent, name := splitPath(path); name == QuotaStatNode && strings.HasPrefix(parent, quotaPath) {
		q := parent[len(quotaPath):]
		count, bytes := t.subtreeCounts(q)
		t.setQuotaStats(path, count, bytes)
	}
	if q, ok := t.quotaPrefix(path); ok {
		t.addQuotaStats(q, size, 1)
	}
}

// quotaDeleted follows DataTree.deleteNode's tail.
func (t *Tree) quotaDeleted(path string, n *node) {
	if q, ok := quotaOf(path); ok {
		delete(t.quotas, q)
		t.record(func() { t.quotas[q] = struct{}{} })
	}
	if q, ok := t.quotaPrefix(path); ok {
		t.addQuotaStats(q, -int64(len(n.data)), -1)
	}
}

// subtreeCounts is the number of nodes at and below path and the bytes of
// their data; 0, 0 when path does not exist.
func (t *Tree) subtreeCounts(path string) (count, bytes int64) {
	if path == "" {
		path = rootPath // ZooKeeper keeps the root under "" too
	}
	n := t.nodes[path]
	if n == nil {
		return 0, 0
	}
	count, bytes = 1, int64(len(n.data))
	for name := range n.children {
		c, b := t.subtreeCounts(joinPath(path, name))
		count += c
		bytes += b
	}
	return count, bytes
}

// setQuotaStats writes a fresh StatsTrack into the stats node at path.
func (t *Tree) setQuotaStats(path string, count, bytes int64) {
	t.replaceData(path, QuotaStats{QuotaCount: count, QuotaBytes: bytes}.Bytes())
}

// addQuotaStats moves the stats of quota path q by the given amounts, as
// updateQuotaStat does; a missing or unreadable stats node is left alone.
func (t *Tree) addQuotaStats(q string, bytes, count int64) {
	sp := quotaStatPath(q)
	n := t.nodes[sp]
	if n == nil {
		return
	}
	s, ok := ParseQuotaStats(n.data)
	if !ok {
		return
	}
	t.quotaBaseline(sp, n)
	s[QuotaCount] = s.Get(QuotaCount) + count
	s[QuotaBytes] = s.Get(QuotaBytes) + bytes
	t.replaceData(sp, s.Bytes())
}

// replaceData sets a node's data as the quota bookkeeping does in
// ZooKeeper: no version, mzxid or mtime moves, only the data and its
// length.
func (t *Tree) replaceData(path string, b []byte) {
	n := t.nodes[path]
	old := n.data
	n.data = b
	n.stat.DataLength = int32(len(b))
	t.dataSize += int64(len(b) - len(old))
	t.record(func() {
		t.dataSize += int64(len(old) - len(n.data))
		n.data = old
		n.stat.DataLength = int32(len(old))
	})
}

// quotaBaseline remembers a stats node's data as it stood before this
// transaction: ZooKeeper checks every op of a multi against the committed
// tree, not against the ops before it.
func (t *Tree) quotaBaseline(path string, n *node) {
	if !t.logging {
		return
	}
	if _, ok := t.quotaBase[path]; !ok {
		t.quotaBase[path] = n.data
	}
}

// checkQuota is ZooKeeperServer.checkQuota for a create (count 1) or a
// setData (count 0) at path growing data by bytes: nil, or
// ErrQuotaExceeded when a hard limit would be passed. Every limit passed
// is noted in t.passed for the member to log, as ZooKeeper logs them.
// Nothing is checked unless the proposer enforces quotas.
func (t *Tree) checkQuota(txn *Txn, path string, bytes, count int64) error {
	if !txn.EnforceQuota {
		return nil
	}
	q, ok := t.quotaPrefix(path)
	if !ok {
		return nil
	}
	ln := t.nodes[quotaLimitPath(q)]
	if ln == nil {
		return nil
	}
	lim, ok := ParseQuotaStats(ln.data)
	if !ok {
		return nil
	}
	checkCount := count != 0 && (lim.Get(QuotaCount) > -1 || lim.Get(QuotaCountHardLimit) > -1)
	checkBytes := bytes != 0 && (lim.Get(QuotaBytes) > -1 || lim.Get(QuotaByteHardLimit) > -1)
	if !checkCount && !checkBytes {
		return nil
	}
	sp := quotaStatPath(q)
	sn := t.nodes[sp]
	if sn == nil {
		return nil
	}
	data := sn.data
	if b, ok := t.quotaBase[sp]; ok {
		data = b
	}
	cur, ok := ParseQuotaStats(data)
	if !ok {
		return nil
	}
	over := func(what, soft, hard string, diff int64) bool {
		limit, isHard := lim.Get(hard), true
		if limit <= -1 {
			limit, isHard = lim.Get(soft), false
		}
		v := cur.Get(soft) + diff
		if v <= limit {
			return false
		}
		t.passed = append(t.passed, QuotaPassed{Path: q, What: what, Value: v, Limit: limit, Hard: isHard})
		return isHard
	}
	if checkCount && over(QuotaCount, QuotaCount, QuotaCountHardLimit, count) {
		return ErrQuotaExceeded
	}
	if checkBytes && over(QuotaBytes, QuotaBytes, QuotaByteHardLimit, bytes) {
		return ErrQuotaExceeded
	}
	return nil
}

// QuotaPassed is a ZooKeeper quota a write went past (soft: it was made
// all the same; hard: it was refused). ZooKeeper logs each as "Quota
// exceeded: /p [current count=6, hardCountLimit=5]".
type QuotaPassed struct {
	Path  string // the path with the quota
	What  string // QuotaCount or QuotaBytes
	Value int64  // what the write would have made it
	Limit int64
	Hard  bool
}

// String is ZooKeeper's log message for it.
func (p QuotaPassed) String() string {
	kind, unit := "soft", "Count"
	if p.Hard {
		kind = "hard"
	}
	if p.What == QuotaBytes {
		unit = "Byte"
	}
	return "Quota exceeded: " + p.Path + " [current " + p.What + "=" + strconv.FormatInt(p.Value, 10) +
		", " + kind + unit + "Limit=" + strconv.FormatInt(p.Limit, 10) + "]"
}

// rebuildQuotas derives the marked paths from the nodes, after a snapshot
// is read. The stats nodes keep the data the snapshot holds (ZooKeeper
// recounts them when it loads a snapshot, but a member restored from one
// must end where the members that applied the log did).
func (t *Tree) rebuildQuotas() {
	for p := range t.nodes {
		if q, ok := quotaOf(p); ok {
			t.quotas[q] = struct{}{}
		}
	}
}

// checkQuotas verifies that the marked paths are those the limits nodes
// stand for.
func (t *Tree) checkQuotas() error {
	n := 0
	for p := range t.nodes {
		if q, ok := quotaOf(p); ok {
			n++
			if _, ok := t.quotas[q]; !ok {
				return fmt.Errorf("%s: quota of %s not marked", p, q)
			}
		}
	}
	if n != len(t.quotas) {
		return fmt.Errorf("%d quotas marked, %d limits nodes", len(t.quotas), n)
	}
	return nil
}
