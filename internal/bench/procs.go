package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/internal/testkit"
)

// This file starts, watches and stops the ensemble members: coordrun and
// Apache ZooKeeper processes on 127.0.0.1.

// Every child is started from one goroutine locked to its OS thread for
// the life of the program. A child's Pdeathsig fires when the *thread* that
// forked it exits; this thread never does, so children are killed exactly
// when the harness dies (even by SIGKILL or a panic).
var spawnCh = make(chan func())

func init() {
	go func() {
		runtime.LockOSThread() // never unlocked
		for f := range spawnCh {
			f()
		}
	}()
}

// startCmd starts cmd in its own process group, to be SIGKILLed if the
// harness dies.
func startCmd(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	errc := make(chan error, 1)
	spawnCh <- func() { errc <- cmd.Start() }
	return <-errc
}

// proc is one long-running child whose output goes to a log file.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed once the process has exited
	exitErr error         // valid after done
}

// children is every proc started, so that stopAll can end them all.
var children struct {
	sync.Mutex
	list []*proc
}

// startProc starts a child with stdout and stderr to logPath and
// registers it for stopAll.
func startProc(name, logPath string, argv ...string) (*proc, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child holds its own descriptor
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	return startChild(name, logPath, cmd)
}

// startChild starts cmd and registers it for stopAll.
func startChild(name, logPath string, cmd *exec.Cmd) (*proc, error) {
	if err := startCmd(cmd); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	children.Lock()
	children.list = append(children.list, p)
	children.Unlock()
	go func() { p.exitErr = cmd.Wait(); close(p.done) }()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// restart starts p's command again (after it exited), logging to a new
// file next to the old log.
func (p *proc) restart() (*proc, error) {
	if !p.exited() {
		return nil, fmt.Errorf("%s: restart while running", p.name)
	}
	for i := 1; ; i++ {
		log := fmt.Sprintf("%s.%d", p.logPath, i)
		if _, err := os.Stat(log); errors.Is(err, os.ErrNotExist) {
			return startProc(p.name, log, p.cmd.Args...)
		}
	}
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the child's process group and SIGKILL after grace.
func (p *proc) stop(grace time.Duration) {
	if p.exited() {
		return
	}
	_ = syscall.Kill(-p.pid(), syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
		<-p.done
	}
}

// stopAll stops every child started, in parallel, and waits for them.
func stopAll() {
	children.Lock()
	list := children.list
	children.list = nil
	children.Unlock()
	var wg sync.WaitGroup
	for _, p := range list {
		wg.Add(1)
		go func() { defer wg.Done(); p.stop(10 * time.Second) }()
	}
	wg.Wait()
}

// logTail is the last n lines of a child's log, indented, for error reports.
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "    (no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "    " + strings.Join(lines, "\n    ")
}

// freePorts reserves n distinct free loopback ports. They are released
// before the members bind them; the window for a clash is small.
func freePorts(n int) ([]int, error) {
	addrs, err := testkit.FindFreeAddrs("127.0.0.1", n)
	if err != nil {
		return nil, err
	}
	ports := make([]int, n)
	for i, a := range addrs {
		_, port, _ := net.SplitHostPort(a)
		if ports[i], err = strconv.Atoi(port); err != nil {
			return nil, err
		}
	}
	return ports, nil
}

// member is one ensemble member as the harness sees it.
type member struct {
	id         int
	clientAddr string
	adminAddr  string // coordrun's /metrics; empty for the others
	proc       *proc
	role       string // "leader" or "follower", from srvr
}

// system is one 3-member ensemble under test.
type system struct {
	name    string // "coordrun" or "zookeeper"
	version string // first line of srvr
	members []*member
}

// clientOrder is the members' client addresses, followers first: sessions
// are dealt round robin in this order, so a single client sits on a
// follower in both systems (as 2 in 3 clients of a real ensemble do).
func (s *system) clientOrder() []string {
	var out []string
	for _, m := range s.members {
		if m.role != "leader" {
			out = append(out, m.clientAddr)
		}
	}
	for _, m := range s.members {
		if m.role == "leader" {
			out = append(out, m.clientAddr)
		}
	}
	return out
}

func (s *system) addrs() []string {
	var out []string
	for _, m := range s.members {
		out = append(out, m.clientAddr)
	}
	return out
}

// startCoordrun starts three coordrun members under dir and waits until
// `coordrun ensemble status --wait` calls the ensemble healthy.
func startCoordrun(ctx context.Context, bin, dir string) (*system, error) {
	sys, err := launchCoordrun(bin, dir)
	if err != nil {
		return sys, err
	}
	var out bytes.Buffer
	st := exec.CommandContext(ctx, bin, "ensemble", "status", "--servers", strings.Join(sys.addrs(), ","), "--wait", "20s")
	st.Stdout, st.Stderr = &out, &out
	err = startCmd(st)
	if err == nil {
		err = st.Wait()
	}
	if err != nil {
		return sys, fmt.Errorf("coordrun ensemble not healthy: %v\n%s%s", err, out.String(), sys.logs())
	}
	return sys, waitServing(ctx, sys, 20*time.Second)
}

// launchCoordrun starts three coordrun members under dir without waiting
// for them.
func launchCoordrun(bin, dir string) (*system, error) {
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("coordrun binary: %w (run make build)", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	ports, err := freePorts(9) // client, peer, admin per member
	if err != nil {
		return nil, err
	}
	var peers []string
	for i := 1; i <= 3; i++ {
		peers = append(peers, fmt.Sprintf("%d=127.0.0.1:%d", i, ports[2+i]))
	}
	sys := &system{name: "coordrun"}
	for i := 1; i <= 3; i++ {
		m := &member{id: i, clientAddr: fmt.Sprintf("127.0.0.1:%d", ports[i-1]), adminAddr: fmt.Sprintf("127.0.0.1:%d", ports[5+i])}
		argv := []string{bin, "server", "--id", strconv.Itoa(i),
			"--data-dir", filepath.Join(dir, fmt.Sprintf("m%d", i)),
			"--client-addr", m.clientAddr,
			"--peer-addr", fmt.Sprintf("127.0.0.1:%d", ports[2+i]),
			"--peers", strings.Join(peers, ","),
			"--admin-addr", m.adminAddr, "--admin-pprof",
			// As ZooKeeper's maxClientCnxns=0 below: the workloads open
			// thousands of sessions from this one address.
			"--max-client-conns", "0",
			"--four-letter-words", "srvr,ruok,isro,mbrs,mntr", // the lock benchmark reads mntr
			"--log-level", "warn"}
		argv = append(argv, coordrunFlags...)
		p, err := startProc(fmt.Sprintf("coordrun-%d", i), filepath.Join(dir, fmt.Sprintf("m%d.log", i)), argv...)
		if err != nil {
			return sys, err
		}
		m.proc = p
		sys.members = append(sys.members, m)
	}
	return sys, nil
}

// startZooKeeper starts three Apache ZooKeeper members under dir and waits
// until srvr shows one leader and two followers.
func startZooKeeper(ctx context.Context, java, classpath string, jvmFlags []string, dir string) (*system, error) {
	sys, err := launchZooKeeper(java, classpath, jvmFlags, dir)
	if err != nil {
		return sys, err
	}
	return sys, waitServing(ctx, sys, 60*time.Second)
}

// launchZooKeeper starts three ZooKeeper members under dir without
// waiting for them.
func launchZooKeeper(java, classpath string, jvmFlags []string, dir string) (*system, error) {
	ports, err := freePorts(9) // client, quorum, election per member
	if err != nil {
		return nil, err
	}
	// log4j.properties for the slf4j-log4j12 binding: warnings to stderr.
	logCfg := "log4j.rootLogger=WARN, CONSOLE\n" +
		"log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender\n" +
		"log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout\n" +
		"log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} %-5p [%t] %c{1}: %m%n\n"
	confDir := filepath.Join(dir, "conf")
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(confDir, "log4j.properties"), []byte(logCfg), 0o644); err != nil {
		return nil, err
	}
	var servers strings.Builder
	for i := 1; i <= 3; i++ {
		fmt.Fprintf(&servers, "server.%d=127.0.0.1:%d:%d\n", i, ports[3+i-1], ports[6+i-1])
	}
	sys := &system{name: "zookeeper"}
	for i := 1; i <= 3; i++ {
		m := &member{id: i, clientAddr: fmt.Sprintf("127.0.0.1:%d", ports[i-1])}
		data := filepath.Join(dir, fmt.Sprintf("z%d", i))
		if err := os.MkdirAll(data, 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(data, "myid"), []byte(fmt.Sprintf("%d\n", i)), 0o644); err != nil {
			return nil, err
		}
		// maxClientCnxns=0: the 1000-waiter lock runs open hundreds of
		// sessions per member from 127.0.0.1 (the default allows 60).
		cfg := fmt.Sprintf("tickTime=2000\ninitLimit=10\nsyncLimit=5\n"+
			"dataDir=%s\nclientPort=%d\nclientPortAddress=127.0.0.1\n"+
			"4lw.commands.whitelist=*\nadmin.enableServer=false\nmaxClientCnxns=0\n%s",
			data, ports[i-1], servers.String())
		cfgPath := filepath.Join(dir, fmt.Sprintf("zoo%d.cfg", i))
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
			return nil, err
		}
		argv := append([]string{java, "-cp", confDir + ":" + classpath}, jvmFlags...)
		argv = append(argv, "org.apache.zookeeper.server.quorum.QuorumPeerMain", cfgPath)
		p, err := startProc(fmt.Sprintf("zookeeper-%d", i), filepath.Join(dir, fmt.Sprintf("z%d.log", i)), argv...)
		if err != nil {
			return nil, err
		}
		m.proc = p
		sys.members = append(sys.members, m)
	}
	return sys, nil
}

// zkClasspath is Debian's: zookeeper.jar (whose manifest Class-Path names
// its dependencies in /usr/share/java), plus an slf4j binding so that the
// server's warnings reach its log instead of slf4j's no-op logger.
func zkClasspath() string {
	cp := []string{"/usr/share/java/zookeeper.jar"}
	for _, j := range []string{"/usr/share/java/slf4j-log4j12.jar", "/usr/share/java/log4j-1.2.jar"} {
		if _, err := os.Stat(j); err == nil {
			cp = append(cp, j)
		}
	}
	return strings.Join(cp, ":")
}

// waitServing polls srvr on every member until all serve with exactly one
// leader, and records each member's role and the version line.
func waitServing(ctx context.Context, sys *system, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last string
	for {
		leaders, ok := 0, true
		for _, m := range sys.members {
			if m.proc.exited() {
				return fmt.Errorf("%s exited: %v\n%s", m.proc.name, m.proc.exitErr, logTail(m.proc.logPath, 20))
			}
			out, err := fourLetter(m.clientAddr, "srvr")
			mode := field(out, "Mode")
			if err != nil || (mode != "leader" && mode != "follower") {
				ok, last = false, fmt.Sprintf("%s: mode %q, %v", m.clientAddr, mode, err)
				continue
			}
			m.role = mode
			if mode == "leader" {
				leaders++
			}
			sys.version = strings.TrimSpace(strings.SplitN(out, "\n", 2)[0])
		}
		if ok && leaders == 1 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s ensemble not serving after %v (last: %s)\n%s", sys.name, timeout, last, sys.logs())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (s *system) logs() string {
	var b strings.Builder
	for _, m := range s.members {
		fmt.Fprintf(&b, "  %s log (%s):\n%s\n", m.proc.name, m.proc.logPath, logTail(m.proc.logPath, 10))
	}
	return b.String()
}

// fourLetter sends a four-letter word and returns the whole answer.
func fourLetter(addr, word string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return client.FourLetter(ctx, addr, word, nil)
}

// field is the value of a "Key: value" line.
func field(text, key string) string {
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && k == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// memory is VmRSS and VmHWM (peak RSS) of a process, in KiB.
func memory(pid int) (rss, hwm int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	kib := func(key string) int64 {
		f := strings.Fields(field(string(b), key)) // "12345 kB"
		if len(f) == 0 {
			return 0
		}
		n, _ := strconv.ParseInt(f[0], 10, 64)
		return n
	}
	rss, hwm = kib("VmRSS"), kib("VmHWM")
	if rss == 0 {
		return 0, 0, errors.New("no VmRSS in /proc status")
	}
	return rss, hwm, nil
}

// rssParts splits a process's resident memory into its anonymous part
// (heap, stacks: what the process allocated) and its file-backed part
// (the binary's pages, a memory-mapped database), in KiB; 0s when
// unknown.
func rssParts(pid int) (anon, file int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	kib := func(key string) int64 {
		f := strings.Fields(field(string(b), key))
		if len(f) == 0 {
			return 0
		}
		n, _ := strconv.ParseInt(f[0], 10, 64)
		return n
	}
	return kib("RssAnon"), kib("RssFile")
}

// clockTick is USER_HZ, the unit of utime and stime in /proc/PID/stat;
// it is 100 on every Linux architecture Go supports.
const clockTick = 10 * time.Millisecond

// cpuTime is the user+system CPU time a process has used so far.
func cpuTime(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the parenthesised command name; utime and stime are
	// the 14th and 15th fields of the whole line.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * clockTick
}

// cpu is the CPU time used so far by all the system's members together.
func (s *system) cpu() time.Duration {
	var d time.Duration
	for _, m := range s.members {
		d += cpuTime(m.proc.pid())
	}
	return d
}
