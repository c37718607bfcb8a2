package testkit

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Process is a started process whose exit is awaited in the background.
type Process struct {
	Cmd     *exec.Cmd
	Name    string      // what failure messages call it
	Out     *SyncBuffer // its stdout and stderr, if Spawn started it
	Started time.Time

	done  chan struct{}
	ended time.Time // set before done is closed
}

// StartProcess starts cmd.
func StartProcess(cmd *exec.Cmd) (*Process, error) {
	p := &Process{Cmd: cmd, done: make(chan struct{})}
	p.Started = time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		_ = cmd.Wait()
		p.ended = time.Now()
		close(p.done)
	}()
	return p, nil
}

// Spawn starts cmd for the test as name, collecting its output in Out.
// When the test ends the process is killed, stopped or not, and if the
// test failed its output is logged.
func Spawn(t testing.TB, name string, cmd *exec.Cmd) *Process {
	t.Helper()
	out := &SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	p, err := StartProcess(cmd)
	if err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	p.Name, p.Out = name, out
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("--- %s (%s) output:\n%s", name, strings.Join(cmd.Args, " "), out.String())
		}
	})
	return p
}

// Pid is the process id.
func (p *Process) Pid() int { return p.Cmd.Process.Pid }

// Done is closed once the process has exited and been reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

// Running reports whether the process has not exited yet (a stopped one
// runs).
func (p *Process) Running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Ended is when the process exited; zero while it runs.
func (p *Process) Ended() time.Time {
	if p.Running() {
		return time.Time{}
	}
	return p.ended
}

// ExitCode is the exit code, -1 while it runs or if a signal ended it.
func (p *Process) ExitCode() int {
	if p.Running() {
		return -1
	}
	return p.Cmd.ProcessState.ExitCode()
}

// Wait waits up to d for the exit and returns the exit code; ok is false
// if the process still runs.
func (p *Process) Wait(d time.Duration) (code int, ok bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return p.ExitCode(), true
	case <-t.C:
		return -1, false
	}
}

// Exit waits up to d for the exit and returns the exit code (-1 if a
// signal ended it); a process still running then fails the test.
func (p *Process) Exit(t testing.TB, d time.Duration) int {
	t.Helper()
	code, ok := p.Wait(d)
	if !ok {
		out := ""
		if p.Out != nil {
			out = p.Out.String()
		}
		t.Fatalf("%s still running after %v; output:\n%s", p.Name, d, out)
	}
	return code
}

// Signal sends sig to the process.
func (p *Process) Signal(sig syscall.Signal) error { return syscall.Kill(p.Pid(), sig) }

// Kill kills the process, stopped or not, and waits until it is reaped.
func (p *Process) Kill() {
	if p.Running() {
		_ = p.Signal(syscall.SIGKILL)
		_ = p.Signal(syscall.SIGCONT)
	}
	<-p.done
}

// ProcessEnsemble is the layout of an ensemble of `coordrun server`
// processes: member i has id i+1, a data dir and client and peer
// addresses, and knows the others by the addresses they are dialed at.
type ProcessEnsemble struct {
	Bin         string
	Dirs        []string
	ClientAddrs []string // where member i serves clients
	PeerAddrs   []string // where member i listens for its peers
	// PeerDial is where the others reach member i's peer port (a proxy in
	// front of it, say); nil means PeerAddrs.
	PeerDial []string
	Args     []string // flags of every member, after the layout's own
	// SecretFile is the ensemble secret every member reads
	// (--peer-secret-file); "" runs the peer port without one.
	SecretFile string
}

// WriteSecretFile writes a fresh ensemble secret, as `coordrun ensemble
// secret` prints it, to dir/peer-secret with mode 0600 and returns its
// path.
func WriteSecretFile(dir string) (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "peer-secret")
	return path, os.WriteFile(path, []byte(base64.StdEncoding.EncodeToString(b)+"\n"), 0o600)
}

// NewProcessEnsemble lays out n members of bin on free addresses of ip,
// with data dirs dir/member-<id>, sharing a new secret in dir.
func NewProcessEnsemble(bin, ip, dir string, n int) (*ProcessEnsemble, error) {
	addrs, err := FindFreeAddrs(ip, 2*n)
	if err != nil {
		return nil, err
	}
	secret, err := WriteSecretFile(dir)
	if err != nil {
		return nil, err
	}
	e := &ProcessEnsemble{Bin: bin, ClientAddrs: addrs[:n], PeerAddrs: addrs[n:], SecretFile: secret}
	for i := 0; i < n; i++ {
		e.Dirs = append(e.Dirs, filepath.Join(dir, fmt.Sprintf("member-%d", i+1)))
	}
	return e, nil
}

// N is the number of members.
func (e *ProcessEnsemble) N() int { return len(e.ClientAddrs) }

// Servers is every member's client address, comma-joined, as --servers
// takes it.
func (e *ProcessEnsemble) Servers() string { return strings.Join(e.ClientAddrs, ",") }

// PeersFlag is the --peers value: id=address of every member.
func (e *ProcessEnsemble) PeersFlag() string {
	dial := e.PeerDial
	if dial == nil {
		dial = e.PeerAddrs
	}
	var parts []string
	for i, a := range dial {
		parts = append(parts, fmt.Sprintf("%d=%s", i+1, a))
	}
	return strings.Join(parts, ",")
}

// ServerArgs are the arguments of member i's `coordrun server`, extra
// flags last.
func (e *ProcessEnsemble) ServerArgs(i int, extra ...string) []string {
	args := []string{"server", "--id", fmt.Sprint(i + 1), "--data-dir", e.Dirs[i],
		"--client-addr", e.ClientAddrs[i], "--peer-addr", e.PeerAddrs[i], "--peers", e.PeersFlag()}
	if e.SecretFile != "" {
		args = append(args, "--peer-secret-file", e.SecretFile)
	}
	if e.PeerDial != nil && e.PeerDial[i] != e.PeerAddrs[i] {
		// The others dial a proxy that forwards to the member.
		args = append(args, "--peer-forwarded")
	}
	return append(append(args, e.Args...), extra...)
}

// Start starts member i with its output to out. A test binary that dies
// leaves no member behind: the member gets SIGKILL when it does.
func (e *ProcessEnsemble) Start(i int, out io.Writer, extra ...string) (*Process, error) {
	cmd := exec.Command(e.Bin, e.ServerArgs(i, extra...)...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return StartProcess(cmd)
}

// RunWithBinary is a TestMain's body for tests of the binary: it sets
// *bin to the coordrun binary under test (see Binary; one it builds goes
// to a temporary directory, removed afterwards) and runs the tests.
func RunWithBinary(m *testing.M, bin *string) int {
	dir, err := os.MkdirTemp("", "coordrun-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if *bin, err = Binary(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// Binary is the coordrun binary under test: $COORDRUN_BIN made absolute,
// or else one built from this module's cmd/coordrun into dir.
func Binary(dir string) (string, error) {
	if b := os.Getenv("COORDRUN_BIN"); b != "" {
		abs, err := filepath.Abs(b)
		if err != nil {
			return "", fmt.Errorf("COORDRUN_BIN: %w", err)
		}
		return abs, nil
	}
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	bin := filepath.Join(dir, "coordrun")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/coordrun")
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(out)))
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building coordrun: %v\n%s", err, out)
	}
	return bin, nil
}
