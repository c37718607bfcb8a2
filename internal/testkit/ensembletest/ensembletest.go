// Package ensembletest starts in-process coordrun ensembles for the
// tests of the packages above the member (client, supervisor, the
// command): testkit's Cluster with ensemble members.
package ensembletest

import (
	"context"
	"testing"

	"github.com/coordrun/coordrun/ensemble"
	"github.com/coordrun/coordrun/internal/testkit"
)

// Cluster is an in-process ensemble of coordrun members.
type Cluster = testkit.Cluster[*ensemble.Member]

// Start starts n members on loopback, each configured by the tweaks,
// waits for a leader, and closes them when the test ends.
func Start(t testing.TB, n int, tweak ...func(*ensemble.Config)) *Cluster {
	t.Helper()
	return testkit.StartCluster(t, config(n, tweak))
}

// Launch starts n members for a fixture that outlives one test: their
// data dirs are temporary ones that Close removes. It waits until ctx
// ends for a leader.
func Launch(ctx context.Context, n int, tweak ...func(*ensemble.Config)) (*Cluster, error) {
	return testkit.LaunchCluster(ctx, config(n, tweak))
}

func config(n int, tweak []func(*ensemble.Config)) testkit.ClusterConfig[*ensemble.Member] {
	return testkit.ClusterConfig[*ensemble.Member]{
		Members: n,
		Start: func(s testkit.MemberSpec) (*ensemble.Member, error) {
			cfg := memberConfig(s)
			for _, f := range tweak {
				f(&cfg)
			}
			return ensemble.Start(cfg)
		},
	}
}

// memberConfig is the configuration of the member s describes, with the
// kit's timing. (The ensemble's own tests, which cannot import this
// package, map a spec the same way.)
func memberConfig(s testkit.MemberSpec) ensemble.Config {
	cfg := ensemble.Config{
		ID:                s.ID,
		DataDir:           s.DataDir,
		PeerListener:      s.PeerListener,
		ClientListener:    s.ClientListener,
		ClientAddr:        s.ClientAddr,
		MinSessionTimeout: testkit.MinSessionTimeout,
		HeartbeatTimeout:  testkit.HeartbeatTimeout,
		ElectionTimeout:   testkit.ElectionTimeout,
		Logger:            s.Logger,
		PeerSecret:        s.PeerSecret,
	}
	for _, p := range s.Peers {
		cfg.Peers = append(cfg.Peers, ensemble.Peer(p))
	}
	return cfg
}

// FourLetterWords is a tweak for members that answer these words (as
// --four-letter-words; "*" for all) instead of the default srvr, ruok,
// isro and mbrs: for tests that read mntr, wchp and the like.
func FourLetterWords(words ...string) func(*ensemble.Config) {
	return func(cfg *ensemble.Config) { cfg.FourLetterWords = words }
}
