// Package netfault drops packets on the loopback interface with iptables,
// for tests that need a network fault the kernel enforces rather than a
// proxy: connections stay open, nothing is reset, bytes simply stop
// arriving, exactly as behind a pulled cable or a dead switch port.
//
// A Chain is one test's set of drop rules. It is an iptables chain of its
// own in the filter table, named coordrun-<pid>-<n>, that OUTPUT and INPUT
// jump to for packets on lo (a loopback packet passes both; whichever hook
// drops it, the sender sees silence). Rules always DROP, never REJECT: a
// TCP peer must not learn of the fault from a reset or an ICMP error.
//
// Only IPv4 loopback addresses (127.0.0.0/8) can be named, so a test
// cannot cut the machine off its real network. Name ports wherever other
// tests may use the same addresses at the same time: a rule between two
// bare IPs drops their traffic for every process on the host.
//
// Caveats: it needs iptables (the nf_tables or the legacy backend) and
// the right to change the rule set (root or CAP_NET_ADMIN); New reports
// ErrUnavailable otherwise. A process killed before Close leaves its
// chain behind; the next New of any process removes the chains whose pid
// is no longer alive.
package netfault

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
)

var (
	// ErrUnavailable: iptables is missing or may not change the rule set.
	ErrUnavailable = errors.New("netfault: iptables unavailable")
	// ErrClosed: the chain was closed.
	ErrClosed = errors.New("netfault: chain closed")
	// ErrNotLoopback: a rule named an address outside 127.0.0.0/8.
	ErrNotLoopback = errors.New("netfault: not an IPv4 loopback address")
)

// prefix starts every chain name of this package; what follows it is
// <pid>-<n>, which is how New tells a dead process's chain from a live one.
const prefix = "coordrun-"

var (
	staleName = regexp.MustCompile(`^` + prefix + `([0-9]+)-[0-9]+$`)
	seq       atomic.Uint64
)

// The jumps into a chain: only packets on lo ever reach its rules.
var hooks = [][]string{{"OUTPUT", "-o", "lo"}, {"INPUT", "-i", "lo"}}

// Rule selects packets to drop. From and To are "IP" or "IP:port" (a port
// means TCP); a packet matching every field that is set is dropped. At
// least one of them must be set.
type Rule struct {
	From string // source address
	To   string // destination address
}

func (r Rule) String() string {
	from, to := r.From, r.To
	if from == "" {
		from = "*"
	}
	if to == "" {
		to = "*"
	}
	return from + " → " + to
}

// match is the rule's iptables match arguments.
func (r Rule) match() ([]string, error) {
	if r.From == "" && r.To == "" {
		return nil, fmt.Errorf("netfault: rule %v names no address", r)
	}
	var args, ports []string
	for _, side := range []struct{ addr, ip, port string }{{r.From, "-s", "--sport"}, {r.To, "-d", "--dport"}} {
		if side.addr == "" {
			continue
		}
		ip, port, err := parse(side.addr)
		if err != nil {
			return nil, err
		}
		args = append(args, side.ip, ip.String()+"/32")
		if port != 0 {
			ports = append(ports, side.port, strconv.Itoa(int(port)))
		}
	}
	if len(ports) > 0 {
		args = append(append(args, "-p", "tcp"), ports...)
	}
	return args, nil
}

// parse reads "IP" or "IP:port" and refuses anything but IPv4 loopback.
func parse(s string) (netip.Addr, uint16, error) {
	var ip netip.Addr
	var port uint16
	if ap, err := netip.ParseAddrPort(s); err == nil {
		ip, port = ap.Addr(), ap.Port()
		if port == 0 {
			return ip, 0, fmt.Errorf("netfault: %q: port 0", s)
		}
	} else if a, err := netip.ParseAddr(s); err == nil {
		ip = a
	} else {
		return ip, 0, fmt.Errorf("netfault: %q is neither IP nor IP:port", s)
	}
	ip = ip.Unmap()
	if !ip.Is4() || ip.As4()[0] != 127 {
		return ip, 0, fmt.Errorf("%w: %q", ErrNotLoopback, s)
	}
	return ip, port, nil
}

// Chain is one set of drop rules on lo. Its methods are safe for
// concurrent use. The caller owns it and must Close it; ForTest does that
// at the test's cleanup.
type Chain struct {
	name string

	mu     sync.Mutex
	closed bool
	hooked [][]string // the jumps in place, for Close
}

// New removes the chains that dead processes left behind, then creates an
// empty chain and the jumps into it.
func New() (*Chain, error) {
	if _, err := exec.LookPath("iptables"); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if _, err := iptables("-S", "OUTPUT"); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	removeStale()
	c := &Chain{name: fmt.Sprintf("%s%d-%d", prefix, os.Getpid(), seq.Add(1))}
	if _, err := iptables("-N", c.name); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	for _, h := range hooks {
		// First in the hook, so that no ACCEPT before it lets packets by.
		args := append([]string{"-I", h[0], "1"}, append(h[1:], "-j", c.name)...)
		if _, err := iptables(args...); err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		c.hooked = append(c.hooked, h)
	}
	return c, nil
}

// ForTest is New for a test: where iptables is unavailable the test is
// skipped (failed when the environment variable CI is set, since CI is
// expected to provide it), and the chain is closed at the test's cleanup,
// also when the test fails or panics.
func ForTest(t testing.TB) *Chain {
	t.Helper()
	c, err := New()
	if err != nil {
		if errors.Is(err, ErrUnavailable) && os.Getenv("CI") == "" {
			t.Skipf("kernel packet drops need iptables and root: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("removing iptables chain %s: %v", c.name, err)
		}
	})
	return c
}

// Name is the iptables chain's name.
func (c *Chain) Name() string { return c.name }

// Drop adds rules; from then on their packets are dropped. Every rule is
// checked before any is added.
func (c *Chain) Drop(rules ...Rule) error {
	var specs [][]string
	for _, r := range rules {
		m, err := r.match()
		if err != nil {
			return err
		}
		specs = append(specs, m)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	for _, m := range specs {
		if _, err := iptables(append(append([]string{"-A", c.name}, m...), "-j", "DROP")...); err != nil {
			return err
		}
	}
	return nil
}

// DropAddr drops everything to and from addr ("IP" or "IP:port"): a
// listener there, or a whole loopback host, goes silent.
func (c *Chain) DropAddr(addr string) error {
	return c.Drop(Rule{To: addr}, Rule{From: addr})
}

// Heal removes every rule; packets flow again. Connections that lost
// packets recover by TCP's retransmission, so their bytes arrive after
// a retransmission timeout rather than at once.
func (c *Chain) Heal() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	_, err := iptables("-F", c.name)
	return err
}

// Close removes the jumps and the chain. Calling it again does nothing.
func (c *Chain) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	var errs []error
	for _, h := range c.hooked {
		if _, err := iptables(append([]string{"-D", h[0]}, append(h[1:], "-j", c.name)...)...); err != nil {
			errs = append(errs, err)
		}
	}
	c.hooked = nil
	// A chain still jumped to cannot be deleted, so a failure above
	// shows here too; the chain is at least left empty.
	if _, err := iptables("-F", c.name); err != nil {
		errs = append(errs, err)
	}
	if _, err := iptables("-X", c.name); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// removeStale deletes this package's chains whose process is gone, with
// the jumps into them. Errors are ignored: another process may be
// removing the same chain, and a leftover chain drops only what its rules
// name, mostly ports that nobody listens on any more.
func removeStale() {
	out, err := iptables("-S")
	if err != nil {
		return
	}
	var lines [][]string
	stale := map[string]bool{}
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		lines = append(lines, f)
		if len(f) != 2 || f[0] != "-N" {
			continue
		}
		m := staleName.FindStringSubmatch(f[1])
		if m == nil {
			continue
		}
		if pid, err := strconv.Atoi(m[1]); err == nil && !alive(pid) {
			stale[f[1]] = true
		}
	}
	if len(stale) == 0 {
		return
	}
	for _, f := range lines {
		if f[0] != "-A" || len(f) < 4 || !stale[f[len(f)-1]] || f[len(f)-2] != "-j" {
			continue
		}
		_, _ = iptables(append([]string{"-D"}, f[1:]...)...)
	}
	for name := range stale {
		_, _ = iptables("-F", name)
		_, _ = iptables("-X", name)
	}
}

// alive reports whether a process with this pid exists (a zombie, or a
// process that reused the pid, counts: the chain is then kept, which errs
// on the safe side).
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// iptables runs iptables on the filter table, waiting for the legacy
// backend's lock rather than failing when another process holds it.
func iptables(args ...string) ([]byte, error) {
	full := append([]string{"-w", "5"}, args...)
	cmd := exec.Command("iptables", full...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("iptables %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return out, nil
}
