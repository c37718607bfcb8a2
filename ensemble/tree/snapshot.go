package tree

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
)

// Snapshot layout (all integers varints unless noted):
//
//	magic "CRTS", format version byte
//	nextSession
//	sessions: count+1, then per session (by id) id, timeout, password
//	ACL table: count, then per list (by key) its entries: perms, scheme, id
//	nodes: count, then per node (by path, so parents precede children)
//	  path, data, ACL table index, czxid, mzxid, ctime, mtime, version,
//	  cversion, aversion, ephemeralOwner, pzxid
//	CRC-32C (Castagnoli) of everything before it, 4 bytes big-endian
//
// NumChildren, DataLength, the child sets, the sessions' ephemeral sets and
// the counters are derived on load rather than stored, so a snapshot cannot
// contradict itself about them. Sorting makes the encoding a pure function
// of the state: equal trees write identical bytes.
const (
	snapMagic   = "CRTS"
	snapVersion = 1
	snapMaxLen  = 1 << 30 // bound on any single string or byte slice
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errCorruptSnapshot is wrapped by every ReadSnapshot decoding failure.
var errCorruptSnapshot = errors.New("tree: corrupt snapshot")

// WriteSnapshot writes the whole state: nodes with their data, ACLs and
// stats, sessions, and the session id counter.
func (t *Tree) WriteSnapshot(w io.Writer) error { return t.writeSnapshot(w, nil) }

// WriteRedactedSnapshot writes the state as WriteSnapshot does, less its
// secrets, for a backup that leaves the member: the password hash of every
// digest ACL entry becomes RedactedDigest ("bob:x", as GetACL shows it to
// a reader without ADMIN), which no password matches, and every session's
// password is the one password(id) gives. The caller gives passwords no
// client knows (random ones), so a session restored from the backup
// cannot be taken over and expires after its timeout. The result reads
// back with ReadSnapshot like any other.
func (t *Tree) WriteRedactedSnapshot(w io.Writer, password func(id int64) []byte) error {
	return t.writeSnapshot(w, password)
}

// RedactedDigest is what a redacted snapshot keeps of a digest ACL
// entry's hash.
const RedactedDigest = "x"

// RedactedDigests counts the digest ACL entries of the tree whose hash was
// redacted (user:x): after a restore from a redacted backup their nodes
// need a setACL by the super user before anyone but super can use them.
func (t *Tree) RedactedDigests() int {
	n := 0
	for _, e := range t.acls {
		for _, a := range e.acl {
			if a.Scheme == schemeDigest && strings.HasSuffix(a.ID, ":"+RedactedDigest) {
				n++
			}
		}
	}
	return n
}

func redactDigest(a ACL) ACL {
	if a.Scheme == schemeDigest {
		if j := strings.IndexByte(a.ID, ':'); j >= 0 {
			a.ID = a.ID[:j+1] + RedactedDigest
		}
	}
	return a
}

func (t *Tree) writeSnapshot(w io.Writer, password func(id int64) []byte) error {
	redact := password != nil
	bw := bufio.NewWriterSize(w, 64<<10)
	e := snapEncoder{w: bw, crc: crc32.New(castagnoli)}
	e.raw([]byte(snapMagic))
	e.raw([]byte{snapVersion})
	e.varint(t.nextSession)

	ids := slices.Sorted(maps.Keys(t.sessions))
	e.uvarint(uint64(len(ids)))
	for _, id := range ids {
		s := t.sessions[id]
		e.varint(id)
		e.varint(int64(s.timeout))
		if redact {
			e.bytes(password(id))
		} else {
			e.bytes(s.password)
		}
	}

	keys := slices.Sorted(maps.Keys(t.acls))
	index := make(map[string]uint64, len(keys))
	e.uvarint(uint64(len(keys)))
	for i, k := range keys {
		index[k] = uint64(i)
		acl := t.acls[k].acl
		e.uvarint(uint64(len(acl)))
		for _, a := range acl {
			if redact {
				a = redactDigest(a)
			}
			e.varint(int64(a.Perms))
			e.string(a.Scheme)
			e.string(a.ID)
		}
	}

	paths := slices.Sorted(maps.Keys(t.nodes))
	e.uvarint(uint64(len(paths)))
	for _, p := range paths {
		n := t.nodes[p]
		e.string(p)
		e.bytes(n.data)
		e.uvarint(index[n.acl.key])
		s := &n.stat
		e.varint(s.Czxid)
		e.varint(s.Mzxid)
		e.varint(s.Ctime)
		e.varint(s.Mtime)
		e.varint(int64(s.Version))
		e.varint(int64(s.Cversion))
		e.varint(int64(s.Aversion))
		e.varint(s.EphemeralOwner)
		e.varint(s.Pzxid)
	}
	if e.err != nil {
		return e.err
	}
	if _, err := bw.Write(binary.BigEndian.AppendUint32(nil, e.crc.Sum32())); err != nil {
		return err
	}
	return bw.Flush()
}

type snapEncoder struct {
	w   *bufio.Writer
	crc hash.Hash32
	buf [binary.MaxVarintLen64]byte
	err error
}

func (e *snapEncoder) raw(p []byte) {
	if e.err != nil {
		return
	}
	e.crc.Write(p)
	_, e.err = e.w.Write(p)
}

func (e *snapEncoder) varint(v int64)   { e.raw(binary.AppendVarint(e.buf[:0], v)) }
func (e *snapEncoder) uvarint(v uint64) { e.raw(binary.AppendUvarint(e.buf[:0], v)) }

func (e *snapEncoder) string(s string) {
	e.uvarint(uint64(len(s)))
	if e.err != nil {
		return
	}
	e.crc.Write([]byte(s))
	_, e.err = e.w.WriteString(s)
}

func (e *snapEncoder) bytes(p []byte) {
	if p == nil {
		e.uvarint(0)
		return
	}
	e.uvarint(uint64(len(p)) + 1)
	e.raw(p)
}

// ReadSnapshot rebuilds a tree from WriteSnapshot's output. A truncated,
// corrupted or inconsistent snapshot is rejected with an error; the checksum
// is verified and the rebuilt tree must pass Check. It reads through a
// buffer, so r may be consumed beyond the end of the snapshot.
func ReadSnapshot(r io.Reader) (*Tree, error) {
	d := snapDecoder{r: bufio.NewReaderSize(r, 64<<10), crc: crc32.New(castagnoli)}
	t, err := d.tree()
	if err == nil {
		err = d.err
	}
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: truncated", errCorruptSnapshot)
		}
		if errors.Is(err, errCorruptSnapshot) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %w", errCorruptSnapshot, err)
	}
	return t, nil
}

func (d *snapDecoder) tree() (*Tree, error) {
	var head [len(snapMagic) + 1]byte
	d.full(head[:])
	if d.err != nil {
		return nil, d.err
	}
	if string(head[:len(snapMagic)]) != snapMagic {
		return nil, fmt.Errorf("%w: bad magic", errCorruptSnapshot)
	}
	if head[len(snapMagic)] != snapVersion {
		return nil, fmt.Errorf("%w: unknown version %d", errCorruptSnapshot, head[len(snapMagic)])
	}
	t := newEmpty()
	t.nextSession = d.varint()

	nSessions := d.uvarint()
	for i := uint64(0); i < nSessions && d.err == nil; i++ {
		id := d.varint()
		timeout := d.int32()
		pw := d.bytes()
		if d.err != nil {
			break
		}
		if id <= 0 || t.sessions[id] != nil {
			return nil, fmt.Errorf("%w: bad session id %d", errCorruptSnapshot, id)
		}
		t.sessions[id] = &session{timeout: timeout, password: pw, ephemerals: make(map[string]struct{})}
	}

	nACLs := d.uvarint()
	var table []*aclEntry
	for i := uint64(0); i < nACLs && d.err == nil; i++ {
		n := d.uvarint()
		var acl []ACL
		for j := uint64(0); j < n && d.err == nil; j++ {
			acl = append(acl, ACL{Perms: d.int32(), Scheme: d.string(), ID: d.string()})
		}
		table = append(table, newACLEntry(acl))
	}

	nNodes := d.uvarint()
	for i := uint64(0); i < nNodes && d.err == nil; i++ {
		path := d.string()
		n := &node{data: d.bytes()}
		idx := d.uvarint()
		s := &n.stat
		s.Czxid = d.varint()
		s.Mzxid = d.varint()
		s.Ctime = d.varint()
		s.Mtime = d.varint()
		s.Version = d.int32()
		s.Cversion = d.int32()
		s.Aversion = d.int32()
		s.EphemeralOwner = d.varint()
		s.Pzxid = d.varint()
		if d.err != nil {
			break
		}
		if idx >= uint64(len(table)) {
			return nil, fmt.Errorf("%w: ACL index %d out of range", errCorruptSnapshot, idx)
		}
		if len(n.data) > math.MaxInt32 {
			return nil, fmt.Errorf("%w: data of %s too long", errCorruptSnapshot, path)
		}
		n.acl = table[idx]
		n.stat.DataLength = int32(len(n.data))
		if err := t.restoreNode(path, n); err != nil {
			return nil, err
		}
	}
	if d.err != nil {
		return nil, d.err
	}
	want := d.crc.Sum32()
	var sum [4]byte
	d.full(sum[:])
	if d.err != nil {
		return nil, d.err
	}
	if binary.BigEndian.Uint32(sum[:]) != want {
		return nil, fmt.Errorf("%w: checksum mismatch", errCorruptSnapshot)
	}
	if t.nodes[rootPath] == nil {
		return nil, fmt.Errorf("%w: no root", errCorruptSnapshot)
	}
	t.rebuildQuotas()
	if err := t.Check(); err != nil {
		return nil, fmt.Errorf("%w: %w", errCorruptSnapshot, err)
	}
	return t, nil
}

// restoreNode adds a node read from a snapshot. Parents precede children in
// a well-formed snapshot, so a missing parent means corruption.
func (t *Tree) restoreNode(path string, n *node) error {
	if t.nodes[path] != nil {
		return fmt.Errorf("%w: duplicate node %q", errCorruptSnapshot, path)
	}
	if path == rootPath {
		n.acl = t.retainACL(n.acl)
		t.nodes[rootPath] = n
		t.dataSize += int64(len(rootPath) + len(n.data))
		return nil
	}
	if err := validatePath(path); err != nil {
		return fmt.Errorf("%w: %w", errCorruptSnapshot, err)
	}
	parentPath, name := splitPath(path)
	parent := t.nodes[parentPath]
	if parent == nil {
		return fmt.Errorf("%w: node %q precedes its parent", errCorruptSnapshot, path)
	}
	if isEphemeralOwner(parent.stat.EphemeralOwner) {
		return fmt.Errorf("%w: ephemeral %q has a child", errCorruptSnapshot, parentPath)
	}
	if o := n.stat.EphemeralOwner; isEphemeralOwner(o) && t.sessions[o] == nil {
		return fmt.Errorf("%w: ephemeral %q of unknown session %d", errCorruptSnapshot, path, o)
	}
	if parent.stat.NumChildren == math.MaxInt32 {
		return fmt.Errorf("%w: too many children under %q", errCorruptSnapshot, parentPath)
	}
	t.link(path, parent, name, n)
	return nil
}

type snapDecoder struct {
	r   *bufio.Reader
	crc hash.Hash32
	err error
}

func (d *snapDecoder) fail(err error) {
	if d.err == nil {
		d.err = err
	}
}

func (d *snapDecoder) full(p []byte) {
	if d.err != nil {
		return
	}
	if _, err := io.ReadFull(d.r, p); err != nil {
		d.fail(err)
		return
	}
	d.crc.Write(p)
}

func (d *snapDecoder) ReadByte() (byte, error) {
	c, err := d.r.ReadByte()
	if err == nil {
		d.crc.Write([]byte{c})
	}
	return c, err
}

func (d *snapDecoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, err := binary.ReadUvarint(d)
	if err != nil {
		d.fail(err)
	}
	return v
}

func (d *snapDecoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, err := binary.ReadVarint(d)
	if err != nil {
		d.fail(err)
	}
	return v
}

func (d *snapDecoder) int32() int32 {
	v := d.varint()
	if v < math.MinInt32 || v > math.MaxInt32 {
		d.fail(fmt.Errorf("%w: int32 out of range", errCorruptSnapshot))
		return 0
	}
	return int32(v)
}

// read returns the next n bytes, growing the buffer as data actually
// arrives so that a forged length cannot force a huge allocation.
func (d *snapDecoder) read(n uint64) []byte {
	if d.err != nil {
		return nil
	}
	if n > snapMaxLen {
		d.fail(fmt.Errorf("%w: length %d too large", errCorruptSnapshot, n))
		return nil
	}
	if n <= 64<<10 {
		p := make([]byte, n)
		d.full(p)
		return p
	}
	var buf bytes.Buffer
	if _, err := io.CopyN(&buf, d.r, int64(n)); err != nil {
		d.fail(err)
		return nil
	}
	d.crc.Write(buf.Bytes())
	return buf.Bytes()
}

func (d *snapDecoder) string() string { return string(d.read(d.uvarint())) }

func (d *snapDecoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil || n == 0 {
		return nil
	}
	return d.read(n - 1)
}

// Equal reports whether two trees hold the same state: the same nodes with
// the same data (nil and empty distinguished), ACLs and stats, the same
// sessions with the same ephemerals, and the same session id counter.
func (t *Tree) Equal(o *Tree) bool {
	if t.nextSession != o.nextSession || len(t.nodes) != len(o.nodes) ||
		len(t.sessions) != len(o.sessions) || t.dataSize != o.dataSize ||
		t.ephemerals != o.ephemerals {
		return false
	}
	for p, n := range t.nodes {
		m := o.nodes[p]
		if m == nil || n.stat != m.stat || n.acl.key != m.acl.key ||
			(n.data == nil) != (m.data == nil) || !bytes.Equal(n.data, m.data) ||
			!maps.Equal(n.children, m.children) {
			return false
		}
	}
	for id, s := range t.sessions {
		x := o.sessions[id]
		if x == nil || s.timeout != x.timeout || !bytes.Equal(s.password, x.password) ||
			(s.password == nil) != (x.password == nil) || !maps.Equal(s.ephemerals, x.ephemerals) {
			return false
		}
	}
	return true
}
