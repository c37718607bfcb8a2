package etcdengine

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/coordrun/coordrun/internal/testkit"
)

// A server older than MinVersion is refused at Dial with both versions
// named, as a configuration error (exit 64): driven against a real etcd by
// raising the minimum above its version, since no etcd older than 3.4 is
// at hand to run.
func TestDialRefusesTooOldServer(t *testing.T) {
	c := testkit.StartEtcd(t, 1)
	ep := endpoints(c)[0]
	ver := strings.TrimSpace(c.Etcdctl("version"))
	old := MinVersion
	MinVersion = [2]int{old[0], 99}
	defer func() { MinVersion = old }()

	conn, err := Dial(ctxT(t), Config{Endpoints: []string{ep}, SessionTimeout: 5 * time.Second})
	if err == nil {
		conn.Close()
		t.Fatalf("Dial of %s (%s) with a minimum of %d.99: no error", ep, ver, old[0])
	}
	var ce *ConfigError
	if !errors.As(err, &ce) {
		t.Errorf("Dial: %v (%T); want a ConfigError, which exits 64", err, err)
	}
	for _, w := range []string{ep, "is version 3.", "needs etcd 3.99 or later"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("Dial: %q lacks %q", err, w)
		}
	}
}
