package supervisor

import (
	"context"
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/ensemble/wire"
)

// ACLs of what coordrun creates. Any client that may delete a lock's nodes
// can make the next in line start early (the run node bounds the damage,
// see lock.go); an ACL that only the supervisors' shared identity may
// change makes the ensemble refuse it.

// ParseACL reads an ACL in zkCli's notation: comma-separated
// scheme:id:perms entries, perms a subset of "cdrwa" (or "all"), e.g.
// "digest:ops:HASH=:cdrwa,world:anyone:r". The id may itself contain
// colons (digest, ip with IPv6); the scheme is up to the first colon and
// the perms after the last.
func ParseACL(s string) ([]wire.ACL, error) {
	var out []wire.ACL
	for _, ent := range strings.Split(s, ",") {
		ent = strings.TrimSpace(ent)
		if ent == "" {
			continue
		}
		scheme, rest, ok := strings.Cut(ent, ":")
		i := strings.LastIndexByte(rest, ':')
		if !ok || i < 0 || scheme == "" {
			return nil, fmt.Errorf("ACL entry %q: want scheme:id:perms", ent)
		}
		id, ps := rest[:i], rest[i+1:]
		perms, err := parsePerms(ps)
		if err != nil {
			return nil, fmt.Errorf("ACL entry %q: %w", ent, err)
		}
		if id == "" && scheme != "auth" {
			return nil, fmt.Errorf("ACL entry %q: empty id", ent)
		}
		out = append(out, wire.ACL{Perms: perms, ID: wire.ID{Scheme: scheme, ID: id}})
	}
	if len(out) == 0 {
		return nil, errors.New("empty ACL")
	}
	return out, nil
}

func parsePerms(s string) (int32, error) {
	if s == "all" {
		return wire.PermAll, nil
	}
	var p int32
	for _, ch := range s {
		switch ch {
		case 'c':
			p |= wire.PermCreate
		case 'd':
			p |= wire.PermDelete
		case 'r':
			p |= wire.PermRead
		case 'w':
			p |= wire.PermWrite
		case 'a':
			p |= wire.PermAdmin
		default:
			return 0, fmt.Errorf("permission %q: want a subset of cdrwa", string(ch))
		}
	}
	if p == 0 {
		return 0, errors.New("no permissions")
	}
	return p, nil
}

// FormatACL writes an ACL in the notation ParseACL reads.
func FormatACL(acl []wire.ACL) string {
	parts := make([]string, len(acl))
	for i, a := range acl {
		parts[i] = a.ID.Scheme + ":" + a.ID.ID + ":" + formatPerms(a.Perms)
	}
	return strings.Join(parts, ",")
}

func formatPerms(p int32) string {
	var b strings.Builder
	for _, x := range []struct {
		bit int32
		ch  byte
	}{{wire.PermCreate, 'c'}, {wire.PermDelete, 'd'}, {wire.PermRead, 'r'}, {wire.PermWrite, 'w'}, {wire.PermAdmin, 'a'}} {
		if p&x.bit != 0 {
			b.WriteByte(x.ch)
		}
	}
	return b.String()
}

// OpenToAll reports whether anyone may delete or change nodes under an ACL.
func OpenToAll(acl []wire.ACL) bool {
	for _, a := range acl {
		if a.ID.Scheme == "world" && a.ID.ID == "anyone" && a.Perms&(wire.PermDelete|wire.PermWrite|wire.PermCreate) != 0 {
			return true
		}
	}
	return false
}

// digestID is ZooKeeper's digest identity of "user:password".
func digestID(userPass string) string {
	user, _, _ := strings.Cut(userPass, ":")
	sum := sha1.Sum([]byte(userPass))
	return user + ":" + base64.StdEncoding.EncodeToString(sum[:])
}

// sessionIdentities are the identities the session is authenticated as
// that other hosts can share: digest users (computed here: whoAmI names
// only the user) and what the server reports for other schemes, such as a
// client certificate's x509 identity; never the ip address. known is false
// when the server cannot say (before ZooKeeper 3.7).
func sessionIdentities(ctx context.Context, c *client.Client, auth []client.Auth) (ids []wire.ID, known bool) {
	for _, a := range auth {
		if a.Scheme == "digest" {
			ids = append(ids, wire.ID{Scheme: "digest", ID: digestID(string(a.Secret))})
		}
	}
	infos, err := c.WhoAmI(ctx)
	if err != nil {
		return ids, false
	}
	for _, in := range infos {
		switch in.AuthScheme {
		case "", "world", "ip", "digest":
			continue
		}
		ids = append(ids, wire.ID{Scheme: in.AuthScheme, ID: in.User})
	}
	return ids, true
}

// lockACL decides the ACL of everything a run creates.
func lockACL(ctx context.Context, o Options, c *client.Client) ([]wire.ACL, error) {
	if o.ACL != nil {
		return o.ACL, nil
	}
	ids, known := sessionIdentities(ctx, c, o.Auth)
	if len(ids) == 0 && !known && o.TLS != nil && len(o.TLS.Certificates) > 0 {
		// A certificate identity the server did not name: let the server
		// expand it ("auth" means the creator's identities).
		return []wire.ACL{{Perms: wire.PermAll, ID: wire.ID{Scheme: "auth"}}, worldRead}, nil
	}
	if len(ids) == 0 {
		o.Log.Warn("no credentials: lock nodes get the open ACL, so any client can delete them; use --auth or a client certificate (see --acl)")
		return client.OpenACL, nil
	}
	acl := make([]wire.ACL, 0, len(ids)+1)
	for _, id := range ids {
		acl = append(acl, wire.ACL{Perms: wire.PermAll, ID: id})
	}
	acl = append(acl, worldRead)
	o.Log.Debug("lock nodes get this ACL", "acl", FormatACL(acl))
	return acl, nil
}

var worldRead = wire.ACL{Perms: wire.PermRead, ID: wire.ID{Scheme: "world", ID: "anyone"}}

// sameACL compares two ACLs as sets.
func sameACL(a, b []wire.ACL) bool {
	key := func(acl []wire.ACL) string {
		parts := make([]string, len(acl))
		for i, x := range acl {
			parts[i] = FormatACL([]wire.ACL{x})
		}
		sort.Strings(parts)
		return strings.Join(parts, ",")
	}
	return key(a) == key(b)
}

// reportFolderACL logs, once, a lock folder whose ACL is not the one this
// run would have given it. The folder is used as it is: changing an ACL
// someone set is an administrator's decision.
func reportFolderACL(ctx context.Context, c *client.Client, dir string, want []wire.ACL, log *slog.Logger) {
	got, _, err := c.GetACL(ctx, dir)
	if err != nil {
		return
	}
	for _, a := range want {
		if a.ID.Scheme == "auth" {
			return // expanded by the server: nothing to compare with
		}
	}
	switch {
	case !sameACL(got, want):
		log.Warn("lock folder has another ACL than configured; using it as it is", "folder", dir, "acl", FormatACL(got), "configured", FormatACL(want))
	case OpenToAll(got):
		log.Warn("lock folder is open to every client: anyone can delete its nodes", "folder", dir, "acl", FormatACL(got))
	}
}
