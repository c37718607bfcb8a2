package ensemble

// Interop with kazoo (Debian's python3-kazoo): testdata/kazoo_interop.py
// runs against a 3-member ensemble and reports each step it passed. The
// test is skipped when no python3 can import kazoo, unless CI is set.

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/coordrun/coordrun/internal/testkit"
)

// interopMissing skips a third-party interop test whose client is not
// installed, or fails it under CI (where .ci/run installs it).
func interopMissing(t *testing.T, what string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("%s (CI is set, so this is a failure)", what)
	}
	t.Skip(what)
}

// findPython returns a python3 that can import module, or "".
func findPython(module string) string {
	for _, py := range []string{"python3", "/usr/bin/python3"} {
		path, err := exec.LookPath(py)
		if err != nil {
			continue
		}
		if exec.Command(path, "-c", "import "+module).Run() == nil {
			return path
		}
	}
	return ""
}

// interopProc is a third-party client program whose stdout lines the test
// reads as they come.
type interopProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	stderr testkit.SyncBuffer
	out    []string // every stdout line read so far
	cancel context.CancelFunc
}

func startInterop(t *testing.T, timeout time.Duration, name string, args ...string) *interopProc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	p := &interopProc{t: t, cmd: exec.CommandContext(ctx, name, args...), lines: make(chan string, 64), cancel: cancel}
	p.cmd.Stderr = &p.stderr
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		defer close(p.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		cancel()
		_ = p.cmd.Wait()
	})
	return p
}

// next returns the next stdout line; ok is false at end of output.
func (p *interopProc) next() (string, bool) {
	line, ok := <-p.lines // the context's deadline ends the process, and so the output
	if ok {
		p.out = append(p.out, line)
	}
	return line, ok
}

// finish reads the rest of the output, waits for the exit and fails on a
// non-zero status.
func (p *interopProc) finish() {
	p.t.Helper()
	for {
		if _, ok := p.next(); !ok {
			break
		}
	}
	if err := p.cmd.Wait(); err != nil {
		p.t.Errorf("%s: %v\nstdout:\n%s\nstderr:\n%s", p.cmd.Path, err, strings.Join(p.out, "\n"), p.stderr.String())
	}
}

// expectOK checks that every want step printed an "OK <step>" line
// (optionally followed by a tab and free text).
func (p *interopProc) expectOK(want ...string) {
	p.t.Helper()
	seen := map[string]bool{}
	for _, l := range p.out {
		if s, ok := strings.CutPrefix(l, "OK "); ok {
			s, _, _ = strings.Cut(s, "\t") // a tab may follow with timing
			seen[s] = true
		}
	}
	for _, w := range want {
		if !seen[w] {
			p.t.Errorf("no %q line from %s", "OK "+w, p.cmd.Path)
		}
	}
}

func TestKazooInterop(t *testing.T) {
	py := findPython("kazoo")
	if py == "" {
		interopMissing(t, "no python3 with kazoo (apt-get install python3-kazoo)")
	}
	// kazoo's server_version() reads envi, off by default here as on
	// ZooKeeper 3.8 (whose whitelist must list it too).
	c := startCluster(t, 3, func(cfg *Config) { cfg.FourLetterWords = []string{"ruok", "envi"} })
	// A follower first: kazoo (randomize_hosts=False) connects to it, so
	// stopping the session's member needs no election.
	leader := c.Leader()
	var hosts []string
	for i, addr := range c.Servers() {
		if i != leader {
			hosts = append(hosts, addr)
		}
	}
	hosts = append(hosts, c.Servers()[leader])

	p := startInterop(t, 50*time.Second, py, "-u", "testdata/kazoo_interop.py", strings.Join(hosts, ","))
	for {
		line, ok := p.next()
		if !ok {
			break
		}
		peer, found := strings.CutPrefix(line, "PEER ")
		if !found {
			continue
		}
		stopped := -1
		for i, addr := range c.Servers() {
			if addr == peer && c.Member(i) != nil {
				c.Stop(i)
				stopped = i
			}
		}
		if stopped < 0 {
			t.Errorf("kazoo reports a connection to %s, not a running member of %v", peer, c.Servers())
		}
		if stopped == leader {
			c.waitLeader()
		}
		if _, err := io.WriteString(p.stdin, "stopped\n"); err != nil {
			t.Errorf("writing to kazoo script: %v", err)
		}
	}
	p.finish()
	p.expectOK("connected", "ensure_path", "crud", "ephemeral_sequence", "watches", "transaction",
		"lock", "ruok", "server_version 3.8.4", "reconnect", "done")
}
