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

// Auth applies an auth packet to the identities a connection holds (auth)
// and returns the new set; certIDs are the identities of its verified
// client certificate. auth is not modified: requests read before keep the
// set they were read with. ok false is ZooKeeper's AuthFailed, after which
// the connection ends.
func Auth(auth, certIDs []tree.Identity, p *wire.AuthPacket) (ids []tree.Identity, ok bool) {
	switch {
	case p.Scheme == SchemeX509:
		// ZooKeeper's X509AuthenticationProvider ignores the payload and
		// authenticates the connection's certificate again: OK when it
		// yields identities (already held, so nothing changes), AuthFailed
		// without one.
		if len(certIDs) == 0 {
			return auth, false
		}
		return AddIdentities(auth, certIDs...), true
	case p.Scheme == "ip":
		// ZooKeeper's IP provider ignores the payload and grants the
		// connection's own address, which every session holds already.
		return auth, true
	case p.Scheme != "digest":
		return auth, false
	}
	// Digest credentials without a colon are taken as ZooKeeper takes
	// them: the whole text is the user, hashed as it is.
	id := tree.Identity{Scheme: "digest", ID: DigestID(string(p.Auth))}
	ids = make([]tree.Identity, 0, len(auth)+1)
	for _, a := range auth {
		if a != id {
			ids = append(ids, a)
		}
	}
	return append(ids, id), true
}

// AddIdentities returns auth with ids appended, skipping those it holds;
// auth itself is not modified.
func AddIdentities(auth []tree.Identity, ids ...tree.Identity) []tree.Identity {
	out := slices.Clip(auth)
	for _, id := range ids {
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
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
