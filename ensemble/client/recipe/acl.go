package recipe

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/ensemble/wire"
)

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

// AccessError: the session may not create what a recipe needs.
type AccessError struct {
	Path     string
	ACL      []wire.ACL // the ACL found on Path, if it could be read
	Identity []string   // the session's identities, if known
	Err      error
}

func (e *AccessError) Error() string {
	who := "an unauthenticated session"
	if len(e.Identity) > 0 {
		who = strings.Join(e.Identity, ", ")
	}
	acl := "unreadable"
	if e.ACL != nil {
		acl = FormatACL(e.ACL)
	}
	return fmt.Sprintf("no permission to join %s (ACL %s) as %s: %v", e.Path, acl, who, e.Err)
}

func (e *AccessError) Unwrap() error { return e.Err }

// accessError describes a refusal on p for the user.
func accessError(ctx context.Context, c *client.Client, p string, err error) error {
	ae := &AccessError{Path: p, Err: err}
	if acl, _, gerr := c.GetACL(ctx, p); gerr == nil {
		ae.ACL = acl
	}
	if ids, werr := c.WhoAmI(ctx); werr == nil {
		for _, id := range ids {
			ae.Identity = append(ae.Identity, id.AuthScheme+":"+id.User)
		}
	}
	return ae
}
