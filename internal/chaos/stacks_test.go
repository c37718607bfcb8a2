package chaos

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// After DumpStacks every member has exited, and its log holds its
// goroutines, raft's among them.
func TestDumpStacks(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Start(ctx, Config{Bin: testBin, Dir: dir, Log: testLog{t}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Pause(1); err != nil {
		t.Fatal(err)
	}
	c.DumpStacks()
	for i := range c.N() {
		if c.Running(i) {
			t.Errorf("member %d still runs", i+1)
		}
		b, err := os.ReadFile(c.LogPath(i))
		if err != nil {
			t.Fatal(err)
		}
		if log := string(b); !strings.Contains(log, "SIGQUIT") || !strings.Contains(log, "github.com/hashicorp/raft.(*Raft)") {
			t.Errorf("member %d's log lacks its stacks (paused before: %v):\n%s", i+1, i == 1, tail(log, 2000))
		}
	}
}

func tail(s string, n int) string { return s[max(0, len(s)-n):] }
