package main

// -hog N: N busy loops, each its own process (a copy of this binary), run
// for the duration of each scale workload, so that the ensembles serve
// while the host's cores are taken, as on a busy machine. A loop is a
// process rather than a goroutine so that it competes with the members as
// another program would, not with the bench's own client.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// hogEnv marks a child started as a busy loop.
const hogEnv = "COORDRUN_BENCH_HOG"

// runHogIfChild spins forever if this process is a hog child; it returns
// at once otherwise. Called first thing in main.
func runHogIfChild() {
	if os.Getenv(hogEnv) != "1" {
		return
	}
	x := uint64(1)
	for {
		x = x*6364136223846793005 + 1442695040888963407
		if x == 0 {
			fmt.Println(x) // never: keeps the loop from being optimised away
		}
	}
}

// maxHogs bounds -hog: more loops than this only measure the scheduler.
const maxHogs = 64

// parseHogs reads -hog: counts of busy loops, comma-separated, 0 for none.
func parseHogs(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 || n > maxHogs {
			return nil, fmt.Errorf("-hog %q: want counts of busy loops from 0 to %d, comma-separated", s, maxHogs)
		}
		out = append(out, n)
	}
	return out, nil
}

// hogs are running busy loops.
type hogs []*proc

// startHogs starts n busy loops, logging (nothing) into dir.
func startHogs(n int, dir string) (hogs, error) {
	if n == 0 {
		return nil, nil
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("-hog: %w", err)
	}
	var hs hogs
	for i := range n {
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), hogEnv+"=1")
		p, err := startChild(fmt.Sprintf("hog-%d", i), filepath.Join(dir, fmt.Sprintf("hog-%d.log", i)), cmd)
		if err != nil {
			hs.stop()
			return nil, err
		}
		hs = append(hs, p)
	}
	return hs, nil
}

// stop ends the loops (they ignore nothing: SIGTERM ends them).
func (hs hogs) stop() {
	for _, p := range hs {
		p.stop(0)
	}
}
