// Package zookeeper starts a standalone Apache ZooKeeper (Debian's
// zookeeper package) on a free loopback port, for the interop tests that
// run coordrun's client and supervisor against the real thing.
package zookeeper

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/coordrun/coordrun/internal/testkit"
)

// Jar is where Debian installs ZooKeeper's server classes.
const Jar = "/usr/share/java/zookeeper.jar"

// FourLetterFunc asks a server a four-letter word: client.FourLetter.
// It is passed in because this package cannot import the client, whose
// own tests start ZooKeeper with it.
type FourLetterFunc func(ctx context.Context, addr, word string, tc *tls.Config) (string, error)

// Java returns the java binary to run ZooKeeper with, or why it cannot run
// here (no java on PATH, or no ZooKeeper jar).
func Java() (string, error) {
	java, err := exec.LookPath("java")
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(Jar); err != nil {
		return "", err
	}
	return java, nil
}

// Server is one running standalone ZooKeeper.
type Server struct {
	Addr string // host:port of its client port
	Dir  string // its config, data and logs; removed by Stop
	proc *testkit.Process
}

// Start runs ZooKeeper with java from a new directory under the system's
// temporary one named after prefix, and returns once it answers "ruok".
// tickTime is 200 ms, so sessions expire within a fifth of a second of
// their timeout, and the session timeouts it grants span 400 ms to 20 s.
// props are Java system properties for it ("zookeeper.enforceQuota=true").
func Start(java, prefix string, ask FourLetterFunc, props ...string) (*Server, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return nil, err
	}
	addrs, err := testkit.FindFreeAddrs("127.0.0.1", 1)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &Server{Addr: addrs[0], Dir: dir}
	_, port, _ := net.SplitHostPort(s.Addr)
	cfg := fmt.Sprintf(`tickTime=200
dataDir=%s
clientPort=%s
clientPortAddress=127.0.0.1
minSessionTimeout=400
maxSessionTimeout=20000
admin.enableServer=false
4lw.commands.whitelist=*
`, filepath.Join(dir, "data"), port)
	cfgPath := filepath.Join(dir, "zoo.cfg")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	args := []string{"-cp", "/etc/zookeeper/conf:" + Jar,
		"-Dzookeeper.log.dir=" + dir, "-Dzookeeper.root.logger=INFO,CONSOLE"}
	for _, p := range props {
		args = append(args, "-D"+p)
	}
	args = append(args, "org.apache.zookeeper.server.ZooKeeperServerMain", cfgPath)
	cmd := exec.Command(java, args...)
	out, err := os.Create(filepath.Join(dir, "zookeeper.out"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = out, out
	s.proc, err = testkit.StartProcess(cmd)
	out.Close() // the child has its own copy
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := s.awaitServing(ask, 60*time.Second); err != nil {
		err = fmt.Errorf("%w\n%s", err, s.Log())
		s.Stop()
		return nil, err
	}
	return s, nil
}

// awaitServing polls the four-letter word ruok until ZooKeeper answers
// imok, the process exits, or d passes.
func (s *Server) awaitServing(ask FourLetterFunc, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		actx, acancel := context.WithTimeout(ctx, 2*time.Second)
		out, _ := ask(actx, s.Addr, "ruok", nil)
		acancel()
		if out == "imok" {
			return nil
		}
		select {
		case <-s.proc.Done():
			return errors.New("ZooKeeper exited while starting")
		case <-ctx.Done():
			return fmt.Errorf("ZooKeeper at %s did not answer ruok within %v", s.Addr, d)
		case <-tick.C:
		}
	}
}

// Log is what ZooKeeper has printed so far.
func (s *Server) Log() string {
	b, _ := os.ReadFile(filepath.Join(s.Dir, "zookeeper.out"))
	return string(b)
}

// Pid is the JVM's process id, for measuring what ZooKeeper spends.
func (s *Server) Pid() int { return s.proc.Pid() }

// Stop kills ZooKeeper and removes its directory.
func (s *Server) Stop() {
	s.proc.Kill()
	os.RemoveAll(s.Dir)
}

// Shared is the one ZooKeeper of a test binary: the first test that asks
// starts it, TestMain stops it.
type Shared struct {
	Prefix     string // of its directory's name
	FourLetter FourLetterFunc

	once sync.Once
	srv  *Server
	err  error
}

// Require returns the java binary to run ZooKeeper with. Without java or
// the jar the test skips, unless CI is set, where it fails.
func Require(t testing.TB) string {
	t.Helper()
	java, err := Java()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("Apache ZooKeeper is required in CI: %v", err)
		}
		t.Skipf("Apache ZooKeeper not installed: %v", err)
	}
	return java
}

// Addr is the shared server's client address; see Require for a machine
// without ZooKeeper.
func (z *Shared) Addr(t testing.TB) string {
	t.Helper()
	java := Require(t)
	z.once.Do(func() { z.srv, z.err = Start(java, z.Prefix, z.FourLetter) })
	if z.err != nil {
		t.Fatalf("starting ZooKeeper: %v", z.err)
	}
	return z.srv.Addr
}

// Stop stops the shared server if it was started.
func (z *Shared) Stop() {
	if z.srv != nil {
		z.srv.Stop()
	}
}
