package zk

import (
	"crypto/sha1"
	"encoding/base64"
	"slices"
	"strings"
	"unicode/utf16"

	"github.com/coordrun/coordrun/ensemble/tree"
	"github.com/coordrun/coordrun/ensemble/wire"
)

// DigestID is ZooKeeper's digest identity for "user:password":
// user:base64(sha1("user:password")).
func DigestID(userPass string) string {
	user, _, _ := strings.Cut(userPass, ":")
	sum := sha1.Sum([]byte(userPass))
	return user + ":" + base64.StdEncoding.EncodeToString(sum[:])
}

// MaxIdentities bounds the identities one connection holds: its ip
// identity, those of its certificate, and what auth packets add. Real
// clients hold one to three. A write's transaction carries those its ACL
// checks need (NeededAuth), so the bound keeps per-connection memory and
// the cost of that trim small. An auth packet that would add one more is
// answered AuthFailed, which ends the connection.
const MaxIdentities = 64

// MaxIdentityBytes bounds the id of an identity an auth packet adds (a
// digest's is the user name, a colon and 28 characters of hash). ZooKeeper
// sets no bound; no real user name comes near it.
const MaxIdentityBytes = 256

// AuthRefusal says why Auth answered AuthFailed.
type AuthRefusal uint8

// Reasons for AuthFailed.
const (
	AuthAccepted  AuthRefusal = iota
	AuthBadScheme             // unknown scheme, or x509 without a certificate identity
	AuthTooMany               // the connection holds MaxIdentities already
	AuthTooLong               // the identity is longer than MaxIdentityBytes
)

// Identities are the identities of one connection: a set, and the order
// they were added in (whoAmI lists them in ZooKeeper's order, which
// depends on it). Adding is O(1). The list is only appended to, so a
// request keeps the identities it was read with by keeping List's slice
// while the connection goes on adding. Not safe for concurrent use; List's
// slices are, read-only.
type Identities struct {
	list []tree.Identity
	set  map[tree.Identity]struct{}
}

// NewIdentities holds ids, duplicates dropped. They count towards
// MaxIdentities but are not refused for it: they come from the
// connection itself, not from what its client sent.
func NewIdentities(ids ...tree.Identity) *Identities {
	s := &Identities{set: make(map[tree.Identity]struct{}, len(ids))}
	for _, id := range ids {
		s.add(id)
	}
	return s
}

// List is the identities held now, in the order they were added. Later
// additions do not change it.
func (s *Identities) List() []tree.Identity { return slices.Clip(s.list) }

// Len is how many identities are held.
func (s *Identities) Len() int { return len(s.list) }

func (s *Identities) add(id tree.Identity) {
	if _, ok := s.set[id]; ok {
		return
	}
	s.set[id] = struct{}{}
	s.list = append(s.list, id)
}

// Auth applies an auth packet to the identities a connection holds;
// certIDs are the identities of its verified client certificate. Anything
// but AuthAccepted is ZooKeeper's AuthFailed, after which the connection
// ends. An identity held already changes nothing.
func (s *Identities) Auth(certIDs []tree.Identity, p *wire.AuthPacket) AuthRefusal {
	switch {
	case p.Scheme == SchemeX509:
		// ZooKeeper's X509AuthenticationProvider ignores the payload and
		// authenticates the connection's certificate again: OK when it
		// yields identities (already held, so nothing changes), AuthFailed
		// without one.
		if len(certIDs) == 0 {
			return AuthBadScheme
		}
		for _, id := range certIDs {
			s.add(id)
		}
		return AuthAccepted
	case p.Scheme == "ip":
		// ZooKeeper's IP provider ignores the payload and grants the
		// connection's own address, which every session holds already.
		return AuthAccepted
	case p.Scheme != "digest":
		return AuthBadScheme
	}
	// Digest credentials without a colon are taken as ZooKeeper takes
	// them: the whole text is the user, hashed as it is.
	user, _, _ := strings.Cut(string(p.Auth), ":")
	if len(user)+29 > MaxIdentityBytes {
		return AuthTooLong
	}
	id := tree.Identity{Scheme: "digest", ID: DigestID(string(p.Auth))}
	if _, ok := s.set[id]; ok {
		return AuthAccepted
	}
	if len(s.list) >= MaxIdentities {
		return AuthTooMany
	}
	s.add(id)
	return AuthAccepted
}

// whoAmI lists the identities as ZooKeeper's whoAmI does: a digest
// identity by its user name alone, in the order ZooKeeper 3.8 keeps them
// (zkSetOrder).
func whoAmI(auth []tree.Identity) wire.WhoAmIResponse {
	var r wire.WhoAmIResponse
	ordered := zkSetOrder(auth)
	for _, a := range ordered {
		user := a.ID
		if a.Scheme == "digest" {
			user, _, _ = strings.Cut(a.ID, ":")
		}
		r.ClientInfo = append(r.ClientInfo, wire.ClientInfo{AuthScheme: a.Scheme, User: user})
	}
	return r
}

// zkSetOrder orders identities as ZooKeeper 3.8 lists a connection's: it
// keeps them in a set backed by a java.util.concurrent.ConcurrentHashMap,
// which iterates by hash bucket (the spread hash of the jute Id's
// hashCode, modulo the table size: 16, doubled whenever the set holds
// three quarters of it) and, within a bucket, in insertion order. The
// order is an artefact of that map, but clients see it in whoAmI.
func zkSetOrder(ids []tree.Identity) []tree.Identity {
	n := 16
	for len(ids) > n*3/4 {
		n *= 2
	}
	out := slices.Clone(ids)
	slices.SortStableFunc(out, func(a, b tree.Identity) int {
		return zkBucket(a, n) - zkBucket(b, n)
	})
	return out
}

func zkBucket(id tree.Identity, n int) int {
	h := int32(17)
	h = 37*h + javaStringHash(id.Scheme)
	h = 37*h + javaStringHash(id.ID)
	u := uint32(h)
	spread := (u ^ u>>16) & 0x7fffffff
	return int(spread & uint32(n-1))
}

// javaStringHash is Java's String.hashCode: over UTF-16 code units.
func javaStringHash(s string) int32 {
	var h int32
	for _, u := range utf16.Encode([]rune(s)) {
		h = 31*h + int32(u)
	}
	return h
}
