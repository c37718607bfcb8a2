package ensemble

import (
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

func TestSmokeSingle(t *testing.T) {
	c := startCluster(t, 1)
	conn, _ := connect(t, c.servers(), 2*time.Second)
	p, err := conn.Create("/a", []byte("x"), 0, zk.WorldACL(zk.PermAll))
	if err != nil || p != "/a" {
		t.Fatalf("create: %q %v", p, err)
	}
	data, st, err := conn.Get("/a")
	if err != nil || string(data) != "x" || st.Version != 0 {
		t.Fatalf("get: %q %+v %v", data, st, err)
	}
}
