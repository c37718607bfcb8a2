package zk

import (
	"crypto/sha1"
	"encoding/base64"
	"slices"
	"strings"

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
// identity by its user name alone.
func whoAmI(auth []tree.Identity) wire.WhoAmIResponse {
	var r wire.WhoAmIResponse
	for _, a := range auth {
		user := a.ID
		if a.Scheme == "digest" {
			user, _, _ = strings.Cut(a.ID, ":")
		}
		r.ClientInfo = append(r.ClientInfo, wire.ClientInfo{AuthScheme: a.Scheme, User: user})
	}
	return r
}
