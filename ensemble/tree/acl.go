package tree

import (
	"encoding/binary"
	"net/netip"
	"strings"
)

// ACL grants Perms to the identities matched by Scheme and ID, as a
// ZooKeeper ACL entry does.
type ACL struct {
	Perms  int32
	Scheme string
	ID     string
}

// Permission bits, with ZooKeeper's values (ZooDefs.Perms).
const (
	PermRead   int32 = 1
	PermWrite  int32 = 2
	PermCreate int32 = 4
	PermDelete int32 = 8
	PermAdmin  int32 = 16
	PermAll    int32 = 31
)

// OpenACL is ZooKeeper's OPEN_ACL_UNSAFE: everyone may do everything.
// Treat it as read-only.
var OpenACL = []ACL{{Perms: PermAll, Scheme: "world", ID: "anyone"}}

// readACL is ZooKeeper's READ_ACL_UNSAFE, the ACL of /zookeeper/config.
var readACL = []ACL{{Perms: PermRead, Scheme: "world", ID: "anyone"}}

// Identity is one authenticated identity of a requesting session, such as
// {"ip", "127.0.0.1"} or {"digest", "bob:<base64 sha1>"}. The identity
// {"super", ""} bypasses every permission check, as ZooKeeper's super user
// does.
type Identity struct {
	Scheme string
	ID     string
}

// Schemes with a server authentication provider: "ip" and "digest", which
// ZooKeeper registers by default, and "x509", which a ZooKeeper serving TLS
// clients registers (X509AuthenticationProvider) and whose identities the
// member derives from verified client certificates. ACL entries of any other
// scheme (besides the pseudo-schemes "world" and "auth") are rejected as
// invalid, and identities of other schemes never match an ACL entry.
const (
	schemeWorld  = "world"
	schemeAuth   = "auth"
	schemeIP     = "ip"
	schemeDigest = "digest"
	schemeX509   = "x509"
	schemeSuper  = "super"
)

// fixupACL validates an ACL list given to create or setACL and expands the
// "auth" pseudo-scheme, following ZooKeeper's PrepRequestProcessor.fixupACL:
// exact duplicates are dropped first; the list must then be non-empty; every
// entry must be world:anyone, auth:<anything> or a valid id of a registered
// scheme. "auth" expands to every identity of the requester whose provider
// counts as authenticated (digest and x509: ZooKeeper's ip provider is not
// authenticated, and "super" has no provider); if there is none the list is
// invalid.
func fixupACL(acl []ACL, auth []Identity) ([]ACL, error) {
	return fixupACLSchemes(acl, auth, true)
}

// fixupACLSchemes is fixupACL with the x509 scheme registered or not: a log
// entry written before coordrun knew the scheme is replayed as it was first
// applied, with x509 entries invalid (see Txn.preX509).
func fixupACLSchemes(acl []ACL, auth []Identity, x509 bool) ([]ACL, error) {
	if len(acl) == 1 && acl[0].Scheme == schemeWorld && acl[0].ID == "anyone" {
		// The common case, with nothing to check or expand. The caller
		// copies the list before keeping it.
		return acl, nil
	}
	uniq := make([]ACL, 0, len(acl))
	for _, a := range acl {
		dup := false
		for _, u := range uniq {
			if u == a {
				dup = true
				break
			}
		}
		if !dup {
			uniq = append(uniq, a)
		}
	}
	if len(uniq) == 0 {
		return nil, ErrInvalidACL
	}
	out := uniq[:0:0]
	for _, a := range uniq {
		switch {
		case a.Scheme == schemeWorld && a.ID == "anyone":
			out = append(out, a)
		case a.Scheme == schemeAuth:
			found := false
			for _, id := range auth {
				if id.Scheme == schemeDigest || (x509 && id.Scheme == schemeX509) { // ExpandsAuth, with the scheme switchable
					found = true
					out = append(out, ACL{Perms: a.Perms, Scheme: id.Scheme, ID: id.ID})
				}
			}
			if !found {
				return nil, ErrInvalidACL
			}
		case a.Scheme == schemeDigest && validDigestID(a.ID):
			out = append(out, a)
		case a.Scheme == schemeIP && validIPID(a.ID):
			out = append(out, a)
		case x509 && a.Scheme == schemeX509 && a.ID != "":
			// ZooKeeper's provider accepts what parses as an X.500 name;
			// coordrun's x509 identities may also be SAN values or single
			// attributes (see the member's --tls-client-identity), so any
			// non-empty id is accepted. Matching is exact either way.
			out = append(out, a)
		default:
			return nil, ErrInvalidACL
		}
	}
	return out, nil
}

// validDigestID mirrors DigestAuthenticationProvider.isValid, which is
// id.split(":").length == 2 in Java: split drops trailing empty strings, so
// "user:hash:" is valid while "user:" is not.
func validDigestID(id string) bool {
	parts := strings.Split(id, ":")
	for len(parts) > 0 && parts[len(parts)-1] == "" {
		parts = parts[:len(parts)-1]
	}
	return len(parts) == 2
}

// validIPID mirrors IPAuthenticationProvider.isValid: an address, optionally
// followed by "/bits".
func validIPID(id string) bool {
	_, _, ok := parseIPExpr(id)
	return ok
}

// ipAddr is a parsed address: 4 bytes for IPv4, 16 for IPv6. A value type,
// so that permission checks do not allocate.
type ipAddr struct {
	b [16]byte
	n int
}

// parseIPExpr parses "addr" or "addr/bits". ZooKeeper 3.8 understands only
// dotted IPv4 (each part a Java int in 0..255); IPv6 is accepted here as an
// extension so that clients connecting over IPv6 can be matched too.
func parseIPExpr(expr string) (addr ipAddr, bits int, ok bool) {
	a, b, hasBits := strings.Cut(expr, "/")
	addr, ok = parseAddr(a)
	if !ok {
		return addr, 0, false
	}
	bits = addr.n * 8
	if hasBits {
		v, ok := parseJavaInt(b)
		if !ok || v < 0 || v > addr.n*8 {
			return addr, 0, false
		}
		bits = v
	}
	return addr, bits, true
}

func parseAddr(s string) (ipAddr, bool) {
	if a, ok := parseV4(s); ok {
		return a, true
	}
	if strings.Contains(s, ":") {
		if a, err := netip.ParseAddr(s); err == nil && a.Is6() && a.Zone() == "" {
			return ipAddr{b: a.As16(), n: 16}, true
		}
	}
	return ipAddr{}, false
}

// parseV4 mirrors IPAuthenticationProvider.v4addr2Bytes.
func parseV4(s string) (ipAddr, bool) {
	out := ipAddr{n: 4}
	for i := range 4 {
		part := s
		if i < 3 {
			j := strings.IndexByte(s, '.')
			if j < 0 {
				return ipAddr{}, false
			}
			part, s = s[:j], s[j+1:]
		} else if strings.IndexByte(s, '.') >= 0 {
			return ipAddr{}, false
		}
		v, ok := parseJavaInt(part)
		if !ok || v < 0 || v > 255 {
			return ipAddr{}, false
		}
		out.b[i] = byte(v)
	}
	return out, true
}

// parseJavaInt accepts what Integer.parseInt accepts for ASCII input: an
// optional sign followed by decimal digits, within int32 range.
func parseJavaInt(s string) (int, bool) {
	neg := false
	if s != "" && (s[0] == '+' || s[0] == '-') {
		neg = s[0] == '-'
		s = s[1:]
	}
	if s == "" {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
		if n > 1<<31 {
			return 0, false
		}
	}
	if neg {
		n = -n
	}
	if n > 1<<31-1 {
		return 0, false
	}
	return n, true
}

// ipMatches mirrors IPAuthenticationProvider.matches: both addresses are
// masked to the expression's prefix length and compared.
func ipMatches(id, expr string) bool {
	acl, bits, ok := parseIPExpr(expr)
	if !ok {
		return false
	}
	remote, ok := parseAddr(id)
	if !ok || remote.n != acl.n {
		return false
	}
	for i := range acl.n {
		m := byte(0xff)
		switch {
		case bits >= (i+1)*8:
		case bits <= i*8:
			m = 0
		default:
			m = ^byte(0xff >> (bits - i*8))
		}
		if acl.b[i]&m != remote.b[i]&m {
			return false
		}
	}
	return true
}

// Permitted reports whether identities auth hold any bit of perm on a node
// with the given ACL, by the rules of every permission check in the tree.
// The member uses it for watch notifications: an Event carries the ACL its
// READ check runs against. Permitted(acl, PermRead, nil) reports whether
// anyone at all may read.
func Permitted(acl []ACL, perm int32, auth []Identity) bool {
	return permitted(acl, perm, auth)
}

// permitted reports whether identities auth hold perm on a node with the
// given ACL, following ZooKeeperServer.checkACL: an empty ACL permits
// everything, a super identity bypasses the check, and otherwise some entry
// with any of the perm bits must match one identity. x509 ids match
// exactly, as X509AuthenticationProvider.matches does.
func permitted(acl []ACL, perm int32, auth []Identity) bool {
	if len(acl) == 0 {
		return true
	}
	for _, id := range auth {
		if id.Scheme == schemeSuper {
			return true
		}
	}
	for _, a := range acl {
		if a.Perms&perm == 0 {
			continue
		}
		if a.Scheme == schemeWorld && a.ID == "anyone" {
			return true
		}
		for _, id := range auth {
			if Matches(a, id) {
				return true
			}
		}
	}
	return false
}

// Matches reports whether ACL entry a names identity id, whatever its
// permissions: digest and x509 ids match exactly, ip ids by the entry's
// address and prefix (ipMatches). world:anyone names everyone but no
// identity in particular, so it matches none here; permitted grants it
// first.
func Matches(a ACL, id Identity) bool {
	if a.Scheme != id.Scheme {
		return false
	}
	switch a.Scheme {
	case schemeDigest, schemeX509:
		return id.ID == a.ID
	case schemeIP:
		return ipMatches(id.ID, a.ID)
	}
	return false
}

// ExpandsAuth reports whether an ACL entry of the "auth" pseudo-scheme
// expands to identity id when a requester holding it creates a node or
// sets an ACL (fixupACL): its digest and x509 identities do, its ip
// identity and super do not.
func ExpandsAuth(id Identity) bool {
	return id.Scheme == schemeDigest || id.Scheme == schemeX509
}

// IsSuper reports whether id is the super identity, which passes every
// permission check.
func IsSuper(id Identity) bool { return id.Scheme == schemeSuper }

// IsAuthScheme reports whether an ACL entry is of the "auth" pseudo-scheme,
// which create and setACL expand to the requester's identities.
func IsAuthScheme(a ACL) bool { return a.Scheme == schemeAuth }

// aclEntry is an interned, reference-counted ACL list. Most nodes share a
// handful of lists (OpenACL above all), so nodes point at a shared entry
// instead of holding their own copy. The list must never be modified.
type aclEntry struct {
	key  string
	acl  []ACL
	refs int
}

// aclKey is an unambiguous encoding of an ACL list, used as the intern key
// and for equality.
func aclKey(acl []ACL) string {
	return string(appendACLKey(nil, acl))
}

func appendACLKey(b []byte, acl []ACL) []byte {
	for _, a := range acl {
		b = binary.BigEndian.AppendUint32(b, uint32(a.Perms))
		b = binary.AppendUvarint(b, uint64(len(a.Scheme)))
		b = append(b, a.Scheme...)
		b = binary.AppendUvarint(b, uint64(len(a.ID)))
		b = append(b, a.ID...)
	}
	return b
}

func newACLEntry(acl []ACL) *aclEntry {
	return &aclEntry{key: aclKey(acl), acl: append([]ACL(nil), acl...)}
}

// retainACL takes a reference to the interned entry equal to e, interning e
// itself if no equal entry is live, and returns the entry to point at.
func (t *Tree) retainACL(e *aclEntry) *aclEntry {
	if cur, ok := t.acls[e.key]; ok {
		cur.refs++
		return cur
	}
	e.refs = 1
	t.acls[e.key] = e
	return e
}

// releaseACL drops a reference, forgetting the entry when it is unused.
func (t *Tree) releaseACL(e *aclEntry) {
	e.refs--
	if e.refs <= 0 {
		if t.acls[e.key] == e {
			delete(t.acls, e.key)
		}
	}
}

// internACL returns the live entry for acl without taking a reference, or a
// new unreferenced one; pass the result to retainACL when a node adopts it.
func (t *Tree) internACL(acl []ACL) *aclEntry {
	var buf [128]byte
	key := appendACLKey(buf[:0], acl)
	if cur, ok := t.acls[string(key)]; ok { // no allocation for the lookup
		return cur
	}
	return &aclEntry{key: string(key), acl: append([]ACL(nil), acl...)}
}
