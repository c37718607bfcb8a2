package main

// -profile-close DIR: while the sessions workload closes every session,
// take a CPU profile of each coordrun member (its --admin-pprof
// endpoint), to see where a mass close spends the members' time.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// coordrunFlags is -coordrun-flags: extra flags for every coordrun
// member (procs.go).
var coordrunFlags []string

// closeProfileDir is -profile-close ("": no profiles).
var closeProfileDir string

// closeProfileSeconds is each profile's length: a mass close of 50,000
// sessions on this machine takes a few seconds to a minute.
const closeProfileSeconds = 15

// profileMembers starts a CPU profile of each member of s that serves
// pprof, written to closeProfileDir/<system>-<sessions>-<member>.pprof; the
// returned wait blocks until they are written. Without -profile-close it
// does nothing.
func profileMembers(ctx context.Context, s *system, n int) (wait func()) {
	if closeProfileDir == "" {
		return func() {}
	}
	var wg sync.WaitGroup
	for _, m := range s.members {
		if m.adminAddr == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			path := filepath.Join(closeProfileDir, fmt.Sprintf("%s-%d-%d-%s.pprof", s.name, n, m.id, m.role))
			if err := fetchProfile(ctx, "http://"+m.adminAddr+fmt.Sprintf("/debug/pprof/profile?seconds=%d", closeProfileSeconds), path); err != nil {
				fmt.Fprintf(os.Stderr, "  profile of %s member %d: %v\n", s.name, m.id, err)
			}
		}()
	}
	return wg.Wait
}

func fetchProfile(ctx context.Context, url, path string) error {
	ctx, cancel := context.WithTimeout(ctx, (closeProfileSeconds+30)*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
