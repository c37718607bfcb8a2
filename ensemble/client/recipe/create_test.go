// The one failure contract of the recipes' guarded create (create.go), shown
// through each recipe that makes its node with it: the lock's queue node,
// the election's candidate, the group's live node and a claim.

package recipe_test

import (
	"context"
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"path"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/ensemble/client/recipe"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/internal/testkit"
)

// guardedUser is one recipe's create: made in folder dir (which exists),
// it returns the node's path.
type guardedUser struct {
	name      string
	ephemeral bool
	make      func(ctx context.Context, c *client.Client, dir string) (string, error)
}

var guardedUsers = []guardedUser{
	{"lock", true, func(ctx context.Context, c *client.Client, dir string) (string, error) {
		e, err := recipe.Enter(ctx, c, dir, recipe.Info{Host: "a"}, recipe.Options{})
		if err != nil {
			return "", err
		}
		return e.Node(), nil
	}},
	{"election", true, func(ctx context.Context, c *client.Client, dir string) (string, error) {
		term, err := recipe.NewElection(c, dir, nil).Campaign(ctx, []byte("me"))
		if err != nil {
			return "", err
		}
		return term.Node(), nil
	}},
	{"membership", true, func(ctx context.Context, c *client.Client, dir string) (string, error) {
		// The group's live folder is dir.
		p, err := recipe.NewGroup(c, path.Dir(dir), nil).Announce(ctx, "m", []byte("mine"))
		if err != nil {
			return "", err
		}
		return p.Node(), nil
	}},
	{"claim", false, func(ctx context.Context, c *client.Client, dir string) (string, error) {
		node := path.Join(dir, "firing")
		won, err := recipe.ClaimOnce(ctx, c, node, []byte(recipe.Nonce()), recipe.ClaimOptions{})
		if err == nil && !won {
			err = errors.New("claim lost")
		}
		return node, err
	}},
}

// guardedDir makes a folder for u's nodes, with acl.
func guardedDir(t *testing.T, b recipeBackend, c *client.Client, u guardedUser, acl []wire.ACL) string {
	t.Helper()
	dir := b.folder(t, u.name)
	if u.name == "membership" {
		dir = path.Join(dir, "live")
	}
	if err := recipe.EnsurePath(testkit.Context(t, 20*time.Second), c, dir, acl); err != nil {
		t.Fatal(err)
	}
	return dir
}

// children lists dir after a sync, from a session of its own.
func children(t *testing.T, b recipeBackend, dir string) []string {
	t.Helper()
	ctx := testkit.Context(t, 20*time.Second)
	c := b.connect(t)
	if err := c.Sync(ctx, dir); err != nil {
		t.Fatal(err)
	}
	kids, _, err := c.Children(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	return kids
}

func TestGuardedCreate(t *testing.T) {
	forEachRecipeBackend(t, func(t *testing.T, b recipeBackend) {
		for _, u := range guardedUsers {
			t.Run(u.name, func(t *testing.T) {
				t.Run("a lost reply: the node is found, not made twice", func(t *testing.T) { guardedLostReply(t, b, u) })
				t.Run("given up mid-create", func(t *testing.T) { guardedGivenUp(t, b, u) })
				t.Run("refused: an AccessError", func(t *testing.T) { guardedRefused(t, b, u) })
			})
		}
	})
}

func guardedLostReply(t *testing.T, b recipeBackend, u guardedUser) {
	dir := guardedDir(t, b, b.connect(t), u, client.OpenACL)
	px := testkit.StartProxy(t, b.servers[0])
	c := b.connectTo(t, px.Addr())
	px.CutReplyTo(wire.OpCreate2)
	node, err := u.make(testkit.Context(t, 30*time.Second), c, dir)
	if err != nil {
		t.Fatal(err)
	}
	if px.Cuts() != 1 {
		t.Fatalf("%d replies cut, want the create's", px.Cuts())
	}
	if kids := children(t, b, dir); len(kids) != 1 || path.Join(dir, kids[0]) != node {
		t.Fatalf("nodes %v, want only %s", kids, node)
	}
}

// An ephemeral node of a create given up on is deleted before the call
// returns, since a session that lives on would keep it; a claim is kept,
// since it may have been won, and no one else wins it.
func guardedGivenUp(t *testing.T, b recipeBackend, u guardedUser) {
	dir := guardedDir(t, b, b.connect(t), u, client.OpenACL)
	px := testkit.StartProxy(t, b.servers[0])
	c := b.connectTo(t, px.Addr())
	if u.ephemeral {
		giveUpMidCreate(t, px, u.name, func(ctx context.Context) error {
			_, err := u.make(ctx, c, dir)
			return err
		})
		if kids := children(t, b, dir); len(kids) != 0 {
			t.Fatalf("nodes %v left by a create given up on, want none", kids)
		}
		return
	}
	held, release := px.HoldReplyTo(wire.OpCreate2)
	defer release()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := u.make(ctx, c, dir)
		done <- err
	}()
	testkit.Recv(t, held, 10*time.Second, "the create's reply held")
	cancel()
	if err := testkit.Recv(t, done, 10*time.Second, u.name+" returns"); !errors.Is(err, context.Canceled) {
		t.Fatalf("%s = %v, want context.Canceled", u.name, err)
	}
	release()
	if kids := children(t, b, dir); len(kids) != 1 {
		t.Fatalf("nodes %v, want the claim kept", kids)
	}
	if _, err := u.make(testkit.Context(t, 20*time.Second), b.connect(t), dir); err == nil {
		t.Fatal("a second claimant won a claim given up on mid-create")
	}
}

func guardedRefused(t *testing.T, b recipeBackend, u guardedUser) {
	sum := sha1.Sum([]byte("ops:secret"))
	acl := []wire.ACL{
		{Perms: wire.PermAll, ID: wire.ID{Scheme: "digest", ID: "ops:" + base64.StdEncoding.EncodeToString(sum[:])}},
		{Perms: wire.PermRead, ID: wire.ID{Scheme: "world", ID: "anyone"}},
	}
	ops := lockConnectAuth(t, b, client.Auth{Scheme: "digest", Secret: []byte("ops:secret")})
	dir := guardedDir(t, b, ops, u, acl)
	_, err := u.make(testkit.Context(t, 20*time.Second), b.connect(t), dir)
	var ae *recipe.AccessError
	if !errors.As(err, &ae) || !errors.Is(err, wire.ErrNoAuth) || ae.Path != dir {
		t.Fatalf("%s without credentials: %v, want an AccessError on %s", u.name, err, dir)
	}
}
