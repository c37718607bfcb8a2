package ensemble

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/go-zookeeper/zk"
)

// Past the member-wide quota a write that grows the tree is refused with
// QUOTAEXCEEDED (-125) and raises the alarm (status, metrics); deletes
// and shrinking writes pass, and once the tree is under the quota again
// the alarm clears and creates succeed.
func TestTreeQuota(t *testing.T) {
	c := startCluster(t, 3, withAdmin, func(cfg *Config) { cfg.MaxTreeNodes = 20; cfg.MaxTreeBytes = 4096 })
	l := c.waitLeader()
	var f *Member
	for _, m := range c.Members() {
		if m != l {
			f = m
		}
	}
	// Through a follower: the refusal does not depend on where the
	// client is.
	conn := testkit.DialZK(t, []string{f.ClientAddr()}, 10*time.Second)
	acl := zk.WorldACL(zk.PermAll)
	const quotaExceeded = "unknown error: -125"
	var made []string
	var err error
	for i := 0; i < 40; i++ {
		p := fmt.Sprintf("/q%02d", i)
		if _, err = conn.Create(p, nil, 0, acl); err != nil {
			break
		}
		made = append(made, p)
	}
	if err == nil || err.Error() != quotaExceeded {
		t.Fatalf("create past 20 znodes: %v, want QUOTAEXCEEDED", err)
	}
	if len(made) < 15 {
		t.Fatalf("only %d creates before the quota", len(made))
	}
	// Data counts too, and a multi is refused whole.
	if _, err := conn.Set(made[0], make([]byte, 5000), -1); err == nil || err.Error() != quotaExceeded {
		t.Fatalf("setData past 4096 bytes: %v", err)
	}
	if _, err := conn.Multi(&zk.CreateRequest{Path: "/m", Acl: acl}); err == nil {
		t.Fatal("multi create past the quota succeeded")
	}
	for _, m := range []*Member{f, l} {
		st := m.localStatus()
		if len(st.Alarms) != 1 || !strings.Contains(st.Alarms[0], "tree quota") || !strings.Contains(st.Alarms[0], "--max-tree-nodes") {
			t.Fatalf("member %s alarms %q", m.cfg.ID, st.Alarms)
		}
	}
	if v, ok := scrapeMetrics(t, f).value("coordrun_tree_quota_exceeded"); !ok || v != 1 {
		t.Fatalf("coordrun_tree_quota_exceeded = %v, %v", v, ok)
	}
	// Shrinking passes; then there is room again.
	for _, p := range made[:5] {
		if err := conn.Delete(p, -1); err != nil {
			t.Fatalf("delete at the quota: %v", err)
		}
	}
	if _, err := conn.Sync("/"); err != nil {
		t.Fatal(err)
	}
	// The quota is read from the tree of the member the client is on
	// (which, after a reconnect under load, may be one a few entries
	// behind): room comes back once that member has applied the deletes.
	testkit.WaitFor(t, 10*time.Second, "a create once the deletes made room", func() bool {
		_, err := conn.Create("/after", nil, 0, acl)
		if err != nil && err.Error() != quotaExceeded {
			t.Fatalf("create after deletes: %v", err)
		}
		return err == nil
	})
	testkit.WaitFor(t, 10*time.Second, "alarms cleared", func() bool {
		return len(f.localStatus().Alarms) == 0 && len(l.localStatus().Alarms) == 0
	})
	if v, ok := scrapeMetrics(t, f).value("coordrun_tree_quota_refusals_total"); !ok || v < 3 {
		t.Fatalf("coordrun_tree_quota_refusals_total = %v, %v", v, ok)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"0B": 0, "512MiB": 512 << 20, "1GiB": 1 << 30, "10KB": 10000, " 7 B ": 7} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for in, want := range map[string]string{"1024": "no unit", "-1MiB": "negative", "1.5GiB": "not a whole number", "3 parsecs": "unknown unit", "": "no unit"} {
		if _, err := ParseSize(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseSize(%q): %v, want %q", in, err, want)
		}
	}
}
