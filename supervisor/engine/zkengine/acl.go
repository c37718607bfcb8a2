package zkengine

import (
	"context"
	"log/slog"
	"sort"
	"strings"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/ensemble/client/recipe"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/ensemble/zk"
)

// ACLs of what coordrun creates. Any client that may delete a lock's nodes
// can make the next in line start early (the run node bounds the damage,
// see the recipe package); an ACL that only the supervisors' shared
// identity may change makes the ensemble refuse it. The same ACL keeps the
// records (who runs what, where, and a cron run's output) from everyone
// else's eyes unless --acl grants them read.

// sessionIdentities are the identities the session is authenticated as
// that other hosts can share: digest users (computed here: whoAmI names
// only the user) and what the server reports for other schemes, such as a
// client certificate's x509 identity; never the ip address. known is false
// when the server cannot say (before ZooKeeper 3.7).
func sessionIdentities(ctx context.Context, c *client.Client, auth []client.Auth) (ids []wire.ID, known bool) {
	for _, a := range auth {
		if a.Scheme == "digest" {
			ids = append(ids, wire.ID{Scheme: "digest", ID: zk.DigestID(string(a.Secret))})
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

// lockACL decides the ACL of everything a session creates: its own
// identities (the credentials it was given, or a client certificate's)
// with every permission and nobody else, plus what --acl adds. Records
// hold host names, users and command lines, and a cron firing's output:
// what a job prints is for whoever runs it, unless they say otherwise.
// Without credentials there is no identity to restrict to: --acl is the
// whole ACL, and without it the open one, with a warning.
func lockACL(ctx context.Context, o DialOptions, c *client.Client, log *slog.Logger) ([]wire.ACL, error) {
	ids, known := sessionIdentities(ctx, c, o.Auth)
	var own []wire.ACL
	for _, id := range ids {
		own = append(own, wire.ACL{Perms: wire.PermAll, ID: id})
	}
	if len(ids) == 0 && !known && o.TLS != nil && len(o.TLS.Certificates) > 0 {
		// A certificate identity the server did not name: let the server
		// expand it ("auth" means the creator's identities).
		own = []wire.ACL{{Perms: wire.PermAll, ID: wire.ID{Scheme: "auth"}}}
	}
	if len(own) == 0 && o.ACL == nil {
		log.Warn("no credentials: lock nodes get the open ACL, so any client can delete them; use --auth or a client certificate (see --acl)")
		return client.OpenACL, nil
	}
	acl := recordACL(own, o.ACL)
	log.Debug("lock nodes get this ACL", "acl", recipe.FormatACL(acl))
	return acl, nil
}

// recordACL is own (the session's identities, every permission) with the
// entries of extra (--acl) added, one entry per identity with the
// permissions of both. Without own, or when extra names the creator itself
// (auth::), extra is the whole ACL.
func recordACL(own, extra []wire.ACL) []wire.ACL {
	if len(own) == 0 {
		return extra
	}
	for _, a := range extra {
		if a.ID.Scheme == "auth" {
			return extra
		}
	}
	out := append([]wire.ACL(nil), own...)
next:
	for _, a := range extra {
		for i := range out {
			if out[i].ID == a.ID {
				out[i].Perms |= a.Perms
				continue next
			}
		}
		out = append(out, a)
	}
	return out
}

// sameACL compares two ACLs as sets.
func sameACL(a, b []wire.ACL) bool {
	key := func(acl []wire.ACL) string {
		parts := make([]string, len(acl))
		for i, x := range acl {
			parts[i] = recipe.FormatACL([]wire.ACL{x})
		}
		sort.Strings(parts)
		return strings.Join(parts, ",")
	}
	return key(a) == key(b)
}

// ReportFolderAccess logs a lock folder whose ACL is not the one this
// session would have given it. The folder is used as it is: changing an
// ACL someone set is an administrator's decision.
func (z *Conn) ReportFolderAccess(ctx context.Context, dir string) {
	got, _, err := z.c.GetACL(ctx, dir)
	want, log := z.o.ACL, z.log
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
		log.Warn("lock folder has another ACL than configured; using it as it is", "folder", dir, "acl", recipe.FormatACL(got), "configured", recipe.FormatACL(want))
	case recipe.OpenToAll(got) && !recipe.OpenToAll(want): // else lockACL said it: one notice per process
		log.Warn("lock folder is open to every client: anyone can delete its nodes", "folder", dir, "acl", recipe.FormatACL(got))
	}
}
