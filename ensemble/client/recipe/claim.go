package recipe

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/ensemble/wire"
)

// ClaimOptions configure ClaimOnce.
type ClaimOptions struct {
	// ACL of the claim's node. Nil: client.OpenACL.
	ACL []wire.ACL
	// Mine recognizes the claimant's own data when a create's reply was
	// lost: the node's data then either is what this claimant wrote or
	// another's. Nil: the data equals what was written, byte for byte
	// (which holds only until the winner rewrites it).
	Mine func(data []byte) bool
}

// Nonce returns a random token for a claimant's data, so that ClaimOnce
// can tell its own create from another's.
func Nonce() string {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	return hex.EncodeToString(rnd[:])
}

// ClaimOnce creates the persistent node with data if no one has: of all
// the contenders that call it for one node, exactly one wins, once, and
// the node stays to say so. A create whose reply was lost is resolved by
// syncing, reading the node back and asking o.Mine (guardedCreate). The
// node's parent must exist. An error leaves the claim's outcome unknown:
// a claim that ctx cut short may have been won, and its node is kept, so
// that no one else wins it.
func ClaimOnce(ctx context.Context, c *client.Client, node string, data []byte, o ClaimOptions) (won bool, err error) {
	if o.ACL == nil {
		o.ACL = client.OpenACL
	}
	g := guardedCreate{c: c, path: node, data: data, acl: o.ACL, mine: o.Mine}
	_, _, err = g.create(ctx)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, wire.ErrNodeExists):
		return false, nil
	}
	return false, err
}

// EnsurePath creates every missing persistent component of p with acl,
// through connection losses (a create that went through is NodeExists the
// next time). A component the session may not create yields an
// *AccessError.
func EnsurePath(ctx context.Context, c *client.Client, p string, acl []wire.ACL) error {
	cur := ""
	for _, part := range strings.Split(strings.Trim(p, "/"), "/") {
		cur += "/" + part
		for {
			_, err := c.Create(ctx, cur, nil, 0, acl)
			if errors.Is(err, client.ErrConnectionLoss) {
				continue
			}
			if errors.Is(err, wire.ErrNoAuth) {
				return accessError(ctx, c, path.Dir(cur), err)
			}
			if err != nil && !errors.Is(err, wire.ErrNodeExists) {
				return fmt.Errorf("create %s: %w", cur, err)
			}
			break
		}
	}
	return nil
}

// folder is what a recipe over one directory holds: its client, the
// directory and the ACL of the nodes it creates. Nothing in it changes,
// so a recipe made of it is safe for concurrent use.
type folder struct {
	c   *client.Client
	dir string
	acl []wire.ACL
}

func newFolder(c *client.Client, dir string, acl []wire.ACL) folder {
	if acl == nil {
		acl = client.OpenACL
	}
	return folder{c: c, dir: path.Clean(dir), acl: acl}
}

// Dir is the recipe's folder.
func (f folder) Dir() string { return f.dir }
