package etcdengine

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/coordrun/coordrun/supervisor/engine"
)

// Records behave as ZooKeeper's nodes do, on etcd keys: creates are
// conditional on absence and on the folder, updates and deletes on the
// version read, sequential names rise, ephemeral records go with the
// session, and one-shot watches fire once.
func TestEtcdStoreRecords(t *testing.T) {
	c := testkit.StartEtcd(t, 1)
	a := dial(t, c, 3*time.Second)
	ctx := ctxT(t)

	if _, _, err := a.Create(ctx, "/coordrun/cron/job", nil, engine.Persistent); !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("create without its folder: %v, want ErrNotFound", err)
	}
	if err := a.EnsureFolder(ctx, "/coordrun/cron/job/firings"); err != nil {
		t.Fatal(err)
	}
	if err := a.EnsureFolder(ctx, "/coordrun/cron/job/firings"); err != nil {
		t.Fatalf("EnsureFolder again: %v", err)
	}
	if _, _, err := a.Create(ctx, "/elsewhere/x", nil, engine.Persistent); err == nil || !strings.Contains(err.Error(), "outside the key prefix") {
		t.Fatalf("create outside the prefix: %v", err)
	}

	p := "/coordrun/cron/job/firings/0000000000060"
	_, st, err := a.Create(ctx, p, []byte("claimed"), engine.Persistent)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Create(ctx, p, []byte("again"), engine.Persistent); !errors.Is(err, engine.ErrExists) {
		t.Fatalf("second create: %v, want ErrExists", err)
	}
	st2, err := a.Update(ctx, p, []byte("running"), st.Version)
	if err != nil {
		t.Fatal(err)
	}
	if st2.Created != st.Created || st2.Version == st.Version {
		t.Fatalf("update stat %+v after %+v", st2, st)
	}
	if _, err := a.Update(ctx, p, []byte("stale"), st.Version); !errors.Is(err, engine.ErrVersion) {
		t.Fatalf("update at a stale version: %v, want ErrVersion", err)
	}
	if err := a.Delete(ctx, "/coordrun/cron/job/firings", engine.AnyVersion); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("delete of a folder with a child: %v", err)
	}

	// Claim: exactly one of two claimants wins.
	claim := "/coordrun/cron/job/firings/0000000000120"
	won1, v1, err := a.Claim(ctx, claim, []byte("a"), func(b []byte) bool { return string(b) == "a" })
	if err != nil {
		t.Fatal(err)
	}
	won2, _, err := a.Claim(ctx, claim, []byte("b"), func(b []byte) bool { return string(b) == "b" })
	if err != nil {
		t.Fatal(err)
	}
	if !won1 || won2 {
		t.Fatalf("claims: first %v, second %v", won1, won2)
	}
	if _, err := a.Update(ctx, claim, []byte("a2"), v1); err != nil {
		t.Fatalf("update at the version the claim gave: %v", err)
	}

	// Sequential names rise, and the counter is never listed.
	if err := a.EnsureFolder(ctx, "/coordrun/cron/job/triggers"); err != nil {
		t.Fatal(err)
	}
	var made []string
	for range 3 {
		name, _, err := a.Create(ctx, "/coordrun/cron/job/triggers/t-", []byte("{}"), engine.Sequential)
		if err != nil {
			t.Fatal(err)
		}
		made = append(made, name)
	}
	if !slices.IsSorted(made) || made[0] != "/coordrun/cron/job/triggers/t-0000000000" {
		t.Fatalf("sequential names %v", made)
	}
	kids, err := a.Children(ctx, "/coordrun/cron/job/triggers")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(kids)
	if !slices.Equal(kids, []string{"t-0000000000", "t-0000000001", "t-0000000002"}) {
		t.Fatalf("children %q", kids)
	}

	// Watches: a child created fires ChildrenChanged; a delete fires
	// Deleted on a data watch.
	_, kch, err := a.ChildrenW(ctx, "/coordrun/cron/job/triggers")
	if err != nil {
		t.Fatal(err)
	}
	_, _, dch, err := a.GetW(ctx, made[0])
	if err != nil {
		t.Fatal(err)
	}
	b := dial(t, c, 3*time.Second)
	if err := b.Delete(ctx, made[0], engine.AnyVersion); err != nil {
		t.Fatal(err)
	}
	if ev := testkit.Recv(t, dch, 5*time.Second, "the data watch"); ev.Kind != engine.Deleted {
		t.Fatalf("data watch: %+v", ev)
	}
	if ev := testkit.Recv(t, kch, 5*time.Second, "the children watch"); ev.Kind != engine.ChildrenChanged {
		t.Fatalf("children watch: %+v", ev)
	}

	// Ephemeral records go with the session.
	if err := a.EnsureFolder(ctx, "/coordrun/cron/job/hosts"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Create(ctx, "/coordrun/cron/job/hosts/b", []byte("{}"), engine.Ephemeral); err != nil {
		t.Fatal(err)
	}
	_, hch, err := a.ChildrenW(ctx, "/coordrun/cron/job/hosts")
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	testkit.Recv(t, hch, 5*time.Second, "the host record's deletion with its session")
	if _, _, err := a.Get(ctx, "/coordrun/cron/job/hosts/b"); !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("ephemeral record after its session closed: %v", err)
	}
}
