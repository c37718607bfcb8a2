package ensemble

import (
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/ensemble/zk"
	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/coordrun/coordrun/supervisor/state"
)

// A client of any member learns how long the leader has not heard from a
// session: a follower asks the leader. A session whose client froze is
// called lingering before it expires, as the leader's status page calls
// it; a session nobody holds is not known.
func TestSessionSilenceFromFollower(t *testing.T) {
	c := startCluster(t, 3)
	leader := c.WaitLeader(t)
	var followers []int
	for i := range 3 {
		if i != leader {
			followers = append(followers, i)
		}
	}
	ctx := testkit.Context(t, 60*time.Second)
	proxy := testkit.StartProxy(t, c.ClientAddr(followers[1]))
	const timeout = 3 * time.Second
	frozen, err := client.Connect(ctx, client.Config{Servers: []string{proxy.Addr()}, SessionTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	defer frozen.Close()
	reader, err := client.Connect(ctx, client.Config{Servers: []string{c.ClientAddr(followers[0])}, SessionTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()

	id := frozen.SessionID()
	if _, _, ok, err := reader.Silence(ctx, id); ok || err != nil {
		t.Fatalf("a session that owns no node the reader can read: known %v, err %v; want not known", ok, err)
	}
	if _, err := frozen.Create(ctx, "/frozen-holder", nil, wire.FlagEphemeral, client.OpenACL); err != nil {
		t.Fatal(err)
	}
	// The reader's member decides by its own tree, which must have
	// applied the create first.
	if err := reader.Sync(ctx, "/frozen-holder"); err != nil {
		t.Fatal(err)
	}
	silent, got, ok, err := reader.Silence(ctx, id)
	if err != nil || !ok || got != timeout || silent > timeout*2/3 {
		t.Fatalf("a live session: silent %v of %v, known %v, err %v; want a short silence of %v", silent, got, ok, err, timeout)
	}
	if l := state.Lingering(state.Liveness{Silence: &state.Silence{Silent: silent, Timeout: got}}); l != "" {
		t.Fatalf("a live session called lingering: %s", l)
	}

	proxy.Silence()
	var verdict string
	testkit.WaitFor(t, 2*timeout, "the frozen session to be called lingering", func() bool {
		silent, got, ok, err := reader.Silence(ctx, id)
		if err != nil || !ok {
			t.Fatalf("the frozen session is not known before it expired: known %v, err %v", ok, err)
		}
		verdict = state.Lingering(state.Liveness{Silence: &state.Silence{Silent: silent, Timeout: got}})
		return verdict != ""
	})
	t.Logf("verdict: %s", verdict)
	testkit.WaitFor(t, 3*timeout, "the frozen session to expire", func() bool {
		_, _, ok, err := reader.Silence(ctx, id)
		return err == nil && !ok
	})
	if _, _, ok, err := reader.Silence(ctx, 0x7fff_0000_0000_0001); ok || err != nil {
		t.Errorf("an unknown session: known %v, err %v; want not known, no error", ok, err)
	}
}

// A session's silence is its own to read, and that of whoever may read
// one of its ephemeral nodes: behind an ACL it tells an outsider nothing,
// not even that the session is alive.
func TestSessionSilenceBehindACL(t *testing.T) {
	c := startCluster(t, 3)
	c.WaitLeader(t)
	ctx := testkit.Context(t, 60*time.Second)
	secret := client.Auth{Scheme: "digest", Secret: []byte("ops:s3cret")}
	owner, err := client.Connect(ctx, client.Config{Servers: []string{c.ClientAddr(0)}, SessionTimeout: 10 * time.Second, Auth: []client.Auth{secret}})
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	acl := []wire.ACL{{Perms: wire.PermAll, ID: wire.ID{Scheme: "digest", ID: zk.DigestID("ops:s3cret")}}}
	if _, err := owner.Create(ctx, "/guarded", nil, wire.FlagEphemeral, acl); err != nil {
		t.Fatal(err)
	}
	id := owner.SessionID()
	if _, _, ok, err := owner.Silence(ctx, id); !ok || err != nil {
		t.Errorf("a session reading its own silence: known %v, err %v", ok, err)
	}
	for i := range 3 {
		outsider, err := client.Connect(ctx, client.Config{Servers: []string{c.ClientAddr(i)}, SessionTimeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, ok, err := outsider.Silence(ctx, id); ok || err != nil {
			t.Errorf("member %d told a client without the digest about a guarded session: known %v, err %v", i, ok, err)
		}
		outsider.Close()
		insider, err := client.Connect(ctx, client.Config{Servers: []string{c.ClientAddr(i)}, SessionTimeout: 10 * time.Second, Auth: []client.Auth{secret}})
		if err != nil {
			t.Fatal(err)
		}
		testkit.WaitFor(t, 10*time.Second, "the guarded node on member "+c.ClientAddr(i), func() bool {
			_, _, ok, err := insider.Silence(ctx, id)
			return ok && err == nil
		})
		insider.Close()
	}
}

// The cost of a silence read against a plain getData in the same run:
// on the leader it is a map lookup; on a follower one member RPC more.
func BenchmarkSilenceRead(b *testing.B) {
	c := testkit.StartCluster(b, testkit.ClusterConfig[*Member]{
		Members: 3,
		Start: func(s testkit.MemberSpec) (*Member, error) {
			cfg := memberConfig(s, nil)
			cfg.PeerListener, cfg.ClientListener = s.PeerListener, s.ClientListener
			return Start(cfg)
		},
		LeaderOf: func(m *Member) string {
			_, id := m.raft.LeaderWithID()
			return string(id)
		},
	})
	leader := c.WaitLeader(b)
	follower := (leader + 1) % 3
	ctx := testkit.Context(b, 5*time.Minute)
	for _, at := range []struct {
		name string
		i    int
	}{{"leader", leader}, {"follower", follower}} {
		cl, err := client.Connect(ctx, client.Config{Servers: []string{c.ClientAddr(at.i)}, SessionTimeout: 10 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		id := cl.SessionID()
		b.Run(at.name+"/silence", func(b *testing.B) {
			for b.Loop() {
				if _, _, ok, err := cl.Silence(ctx, id); err != nil || !ok {
					b.Fatal(ok, err)
				}
			}
		})
		b.Run(at.name+"/getData", func(b *testing.B) {
			for b.Loop() {
				if _, _, err := cl.Get(ctx, "/zookeeper/config"); err != nil {
					b.Fatal(err)
				}
			}
		})
		cl.Close()
	}
}
