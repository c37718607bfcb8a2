package netfault

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// testIPs are loopback addresses of this test process's own (derived from
// its pid), so that rules naming bare IPs cut no one else's traffic.
func testIPs() (server, client string) {
	p := os.Getpid()
	a, b := (p>>8)&255, p&255%250+1
	return fmt.Sprintf("127.99.%d.%d", a, b), fmt.Sprintf("127.98.%d.%d", a, b)
}

// listen accepts connections on ip and hands them over on the channel;
// everything is closed at cleanup.
func listen(t *testing.T, ip string) (net.Listener, <-chan net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	conns := make(chan net.Conn, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns <- c
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		close(conns)
		for c := range conns {
			c.Close()
		}
	})
	return ln, conns
}

// echo serves every accepted connection by echoing it.
func echo(conns <-chan net.Conn) {
	go func() {
		for c := range conns {
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
}

func dial(t *testing.T, from, to string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second}
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	c, err := d.Dial("tcp", to)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// readExactly reads len(want) bytes within d and compares them.
func readExactly(t *testing.T, c net.Conn, want string, d time.Duration) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, len(want))
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatalf("reading %q: %v", want, err)
	}
	if string(buf) != want {
		t.Fatalf("read %q, want %q", buf, want)
	}
}

// hearsNothing checks that a read on c times out: no bytes, and neither a
// reset nor an end of stream.
func hearsNothing(t *testing.T, c net.Conn, what string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if n > 0 {
		t.Fatalf("%s: read %q through a drop", what, buf[:n])
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("%s: read ended with %v, want a timeout (silence, not a reset)", what, err)
	}
}

func write(t *testing.T, c net.Conn, s string) {
	t.Helper()
	_ = c.SetWriteDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte(s)); err != nil {
		t.Fatalf("writing %q: %v (a drop must not fail the sender)", s, err)
	}
}

// rules is the filter table as iptables -S prints it.
func rules(t *testing.T) string {
	t.Helper()
	out, err := iptables("-S")
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func TestDropAddrSilencesAndHeals(t *testing.T) {
	c := ForTest(t)
	ip, _ := testIPs()
	ln, conns := listen(t, ip)
	echo(conns)
	addr := ln.Addr().String()
	conn := dial(t, "", addr)
	write(t, conn, "before")
	readExactly(t, conn, "before", 5*time.Second)

	if err := c.DropAddr(addr); err != nil {
		t.Fatal(err)
	}
	write(t, conn, "during")
	hearsNothing(t, conn, "the open connection")
	nd := net.Dialer{Timeout: 300 * time.Millisecond}
	if nc, err := nd.Dial("tcp", addr); err == nil {
		nc.Close()
		t.Fatal("a new connection was established through the drop")
	} else if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		// The dial's timer or the socket's deadline may end it, with
		// errors of either kind; a refusal is no timeout.
		t.Fatalf("a new connection failed with %v, want a timeout (silence, not a refusal)", err)
	}

	if err := c.Heal(); err != nil {
		t.Fatal(err)
	}
	// What was written during the drop comes through once TCP
	// retransmits it.
	readExactly(t, conn, "during", 10*time.Second)
	write(t, conn, "after")
	readExactly(t, conn, "after", 5*time.Second)
}

func TestDropOneWay(t *testing.T) {
	c := ForTest(t)
	srvIP, cliIP := testIPs()
	ln, conns := listen(t, srvIP)
	cli := dial(t, cliIP, ln.Addr().String())
	var srv net.Conn
	select {
	case srv = <-conns:
		t.Cleanup(func() { srv.Close() })
	case <-time.After(5 * time.Second):
		t.Fatal("no connection accepted")
	}

	if err := c.Drop(Rule{From: cliIP, To: srvIP}); err != nil {
		t.Fatal(err)
	}
	// The other direction still delivers (only its acknowledgements are
	// lost, so the sender retransmits, unseen by the receiver).
	write(t, srv, "down")
	readExactly(t, cli, "down", 5*time.Second)
	write(t, cli, "up")
	hearsNothing(t, srv, "the server")

	if err := c.Heal(); err != nil {
		t.Fatal(err)
	}
	readExactly(t, srv, "up", 10*time.Second)
}

func TestCloseRemovesEverything(t *testing.T) {
	c := ForTest(t)
	ip, _ := testIPs()
	if err := c.Drop(Rule{To: ip + ":9"}, Rule{From: ip}); err != nil {
		t.Fatal(err)
	}
	if s := rules(t); !strings.Contains(s, "-N "+c.Name()) || strings.Count(s, "-j "+c.Name()) != 2 {
		t.Fatalf("chain %s or its two jumps missing:\n%s", c.Name(), s)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if s := rules(t); strings.Contains(s, c.Name()) {
		t.Fatalf("chain %s left behind:\n%s", c.Name(), s)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := c.Drop(Rule{To: ip}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Drop after Close: %v, want ErrClosed", err)
	}
	if err := c.Heal(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Heal after Close: %v, want ErrClosed", err)
	}
}

// A chain whose process died is removed by the next New; one of a live
// process is left alone.
func TestNewRemovesStaleChains(t *testing.T) {
	ForTest(t) // skips where iptables is unavailable
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	if alive(gone.Process.Pid) {
		t.Skipf("pid %d was reused at once", gone.Process.Pid)
	}
	stale := fmt.Sprintf("%s%d-1", prefix, gone.Process.Pid)
	live := fmt.Sprintf("%s%d-999999", prefix, os.Getpid())
	ip, _ := testIPs()
	for _, name := range []string{stale, live} {
		remove := func() {
			for _, h := range hooks {
				_, _ = iptables(append([]string{"-D", h[0]}, append(h[1:], "-j", name)...)...)
			}
			_, _ = iptables("-F", name)
			_, _ = iptables("-X", name)
		}
		t.Cleanup(remove)
		if _, err := iptables("-N", name); err != nil {
			t.Fatal(err)
		}
		if _, err := iptables("-A", name, "-d", ip+"/32", "-p", "tcp", "--dport", "9", "-j", "DROP"); err != nil {
			t.Fatal(err)
		}
		for _, h := range hooks {
			if _, err := iptables(append([]string{"-A", h[0]}, append(h[1:], "-j", name)...)...); err != nil {
				t.Fatal(err)
			}
		}
	}
	c, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := rules(t)
	if strings.Contains(s, stale) {
		t.Errorf("the dead process's chain %s survived New:\n%s", stale, s)
	}
	if !strings.Contains(s, "-N "+live) || strings.Count(s, "-j "+live) != 2 {
		t.Errorf("the live process's chain %s or its jumps were removed:\n%s", live, s)
	}
}

func TestRuleMatch(t *testing.T) {
	for _, tc := range []struct {
		rule Rule
		want string // iptables arguments, or "error" / "loopback" for a refusal
	}{
		{Rule{From: "127.0.0.11", To: "127.0.0.12"}, "-s 127.0.0.11/32 -d 127.0.0.12/32"},
		{Rule{To: "127.0.0.12:2888"}, "-d 127.0.0.12/32 -p tcp --dport 2888"},
		{Rule{From: "127.0.0.11:2181"}, "-s 127.0.0.11/32 -p tcp --sport 2181"},
		{Rule{From: "127.0.0.11", To: "127.0.0.12:2888"}, "-s 127.0.0.11/32 -d 127.0.0.12/32 -p tcp --dport 2888"},
		{Rule{From: "127.1.2.3:5", To: "127.0.0.12:2888"}, "-s 127.1.2.3/32 -d 127.0.0.12/32 -p tcp --sport 5 --dport 2888"},
		{Rule{}, "error"},
		{Rule{To: "127.0.0.1:0"}, "error"},
		{Rule{To: "localhost:80"}, "error"},
		{Rule{To: "127.0.0.0/8"}, "error"},
		{Rule{To: "10.0.0.1"}, "loopback"},
		{Rule{From: "127.0.0.1", To: "192.168.1.1:80"}, "loopback"},
		{Rule{To: "[::1]:80"}, "loopback"},
		{Rule{From: "0.0.0.0"}, "loopback"},
	} {
		args, err := tc.rule.match()
		got := strings.Join(args, " ")
		switch tc.want {
		case "error":
			if err == nil {
				t.Errorf("%v: accepted as %q", tc.rule, got)
			}
		case "loopback":
			if !errors.Is(err, ErrNotLoopback) {
				t.Errorf("%v: %q, %v; want ErrNotLoopback", tc.rule, got, err)
			}
		default:
			if err != nil || got != tc.want {
				t.Errorf("%v: %q, %v; want %q", tc.rule, got, err, tc.want)
			}
		}
	}
}
