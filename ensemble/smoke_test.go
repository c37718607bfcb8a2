package ensemble

import (
	"testing"
	"time"

	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/go-zookeeper/zk"
)

func TestSmokeSingle(t *testing.T) {
	c := startCluster(t, 1)
	conn := testkit.DialZK(t, c.Servers(), 2*time.Second)
	p, err := conn.Create("/a", []byte("x"), 0, zk.WorldACL(zk.PermAll))
	if err != nil || p != "/a" {
		t.Fatalf("create: %q %v", p, err)
	}
	data, st, err := conn.Get("/a")
	if err != nil || string(data) != "x" || st.Version != 0 {
		t.Fatalf("get: %q %+v %v", data, st, err)
	}
}

func TestSmokeThree(t *testing.T) {
	c := startCluster(t, 3)
	for i := range c.N() {
		conn := testkit.DialZK(t, []string{c.cfgs[i].ClientAddr}, 2*time.Second)
		p, err := conn.Create("/n", []byte("x"), zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
		if err != nil {
			t.Fatalf("member %d: create: %v", i, err)
		}
		data, _, err := conn.Get(p)
		if err != nil || string(data) != "x" {
			t.Fatalf("member %d: get %s: %q %v", i, p, data, err)
		}
		if _, err := conn.Sync("/"); err != nil {
			t.Fatalf("sync: %v", err)
		}
	}
}
