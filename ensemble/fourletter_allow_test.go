package ensemble

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/coordrun/coordrun/internal/testkit"
)

// TestFourLetterWhitelist: by default only srvr, ruok, isro and mbrs
// answer; every other word gets ZooKeeper 3.8's whitelist line, and "*"
// turns them all on. snap is not governed by the list.
func TestFourLetterWhitelist(t *testing.T) {
	off := []string{"stat", "mntr", "conf", "envi", "srst", "wchs", "wchp", "wchc"}
	answers := func(word, out string) bool {
		return out != "" && out != notWhitelisted(word) && !strings.HasPrefix(out, "error")
	}
	def := startCluster(t, 1)
	for _, w := range defaultFourLetterWords {
		if out := fourLetter(t, def.Servers()[0], w); !answers(w, out) {
			t.Errorf("default list: %s answered %q", w, out)
		}
	}
	for _, w := range off {
		if out := fourLetter(t, def.Servers()[0], w); out != w+" is not executed because it is not in the whitelist.\n" {
			t.Errorf("default list: %s answered %q", w, out)
		}
	}
	if out := fourLetter(t, def.Servers()[0], snapshotWord); !strings.HasPrefix(out, "error: snapshots need an administrator") {
		t.Errorf("snap: %q", out)
	}

	all := startCluster(t, 1, func(cfg *Config) { cfg.FourLetterWords = []string{"*"} })
	for _, w := range append(off, defaultFourLetterWords...) {
		if out := fourLetter(t, all.Servers()[0], w); !answers(w, out) {
			t.Errorf("*: %s answered %q", w, out)
		}
	}

	// ruok answers whatever the list: the member's own liveness check
	// asks it.
	some := startCluster(t, 1, func(cfg *Config) { cfg.FourLetterWords = []string{"mntr", " srvr"} })
	for w, on := range map[string]bool{"mntr": true, "srvr": true, "ruok": true, "isro": false, "mbrs": false} {
		if out := fourLetter(t, some.Servers()[0], w); answers(w, out) != on {
			t.Errorf("mntr,srvr: %s answered %q", w, out)
		}
	}
	if err := some.Member(0).Live(testkit.Context(t, 5*time.Second)); err != nil {
		t.Errorf("liveness with ruok off the list: %v", err)
	}
}

func TestParseFourLetterWords(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want string
		err  bool
	}{
		{nil, "srvr,ruok,isro,mbrs", false},
		{[]string{""}, "srvr,ruok,isro,mbrs", false},
		{[]string{"mntr", "mntr", "stat"}, "mntr,stat", false},
		{[]string{"ruok", "*"}, "*", false},
		{[]string{"dump"}, "", true},
		{[]string{"snap"}, "", true},
	} {
		got, err := parseFourLetterWords(tc.in)
		if (err != nil) != tc.err || (err == nil && strings.Join(got, ",") != tc.want) {
			t.Errorf("%q: %v %v, want %s (error %v)", tc.in, got, err, tc.want, tc.err)
		}
	}
	_, err := Start(Config{ID: "1", DataDir: t.TempDir(), PeerAddr: "127.0.0.1:0", FourLetterWords: []string{"dump"}})
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Field != "FourLetterWords" || !strings.Contains(err.Error(), "known: ") {
		t.Errorf("unknown word: %v", err)
	}
}
