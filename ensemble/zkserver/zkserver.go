// Package zkserver starts a standalone Apache ZooKeeper (Debian's
// zookeeper package) on a free loopback port, for the interop tests that
// run coordrun's client and supervisor against the real thing.
package zkserver

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// Jar is where Debian installs ZooKeeper's server classes.
const Jar = "/usr/share/java/zookeeper.jar"

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
	cmd  *exec.Cmd
	done chan struct{}
}

// Start runs ZooKeeper with java from a new directory under the system's
// temporary one named after prefix, and returns once it answers "ruok".
// tickTime is 200 ms, so sessions expire within a fifth of a second of
// their timeout, and the session timeouts it grants span 400 ms to 20 s.
func Start(java, prefix string) (*Server, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return nil, err
	}
	s := &Server{Dir: dir, done: make(chan struct{})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	s.Addr = fmt.Sprintf("127.0.0.1:%d", port)
	cfg := fmt.Sprintf(`tickTime=200
dataDir=%s
clientPort=%d
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
	s.cmd = exec.Command(java, "-cp", "/etc/zookeeper/conf:"+Jar,
		"-Dzookeeper.log.dir="+dir, "-Dzookeeper.root.logger=INFO,CONSOLE",
		"org.apache.zookeeper.server.ZooKeeperServerMain", cfgPath)
	out, err := os.Create(filepath.Join(dir, "zookeeper.out"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s.cmd.Stdout, s.cmd.Stderr = out, out
	err = s.cmd.Start()
	out.Close() // the child has its own copy
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	if err := s.awaitServing(60 * time.Second); err != nil {
		err = fmt.Errorf("%w\n%s", err, s.Log())
		s.Stop()
		return nil, err
	}
	return s, nil
}

// awaitServing polls the four-letter word ruok until ZooKeeper answers
// imok, the process exits, or d passes.
func (s *Server) awaitServing(d time.Duration) error {
	deadline := time.Now().Add(d)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if s.ruok() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("ZooKeeper at %s did not answer ruok within %v", s.Addr, d)
		}
		select {
		case <-s.done:
			return errors.New("ZooKeeper exited while starting")
		case <-tick.C:
		}
	}
}

func (s *Server) ruok() bool {
	c, err := net.DialTimeout("tcp", s.Addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("ruok")); err != nil {
		return false
	}
	b, _ := io.ReadAll(c)
	return string(b) == "imok"
}

// Log is what ZooKeeper has printed so far.
func (s *Server) Log() string {
	b, _ := os.ReadFile(filepath.Join(s.Dir, "zookeeper.out"))
	return string(b)
}

// Stop kills ZooKeeper and removes its directory.
func (s *Server) Stop() {
	if s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	os.RemoveAll(s.Dir)
}
