package testkit

import (
	"net"
	"testing"
)

// FindFreeAddrs returns n distinct host:port addresses on ip that nothing
// listens on. They are released before use, so another process could take
// one meanwhile; on a test machine that is rare enough, and on a private
// loopback address (127.0.0.11, say) nothing else competes.
func FindFreeAddrs(ip string, n int) ([]string, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	var addrs []string
	for i := 0; i < n; i++ {
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		addrs = append(addrs, ln.Addr().String())
	}
	return addrs, nil
}

// FreeAddrs is FindFreeAddrs failing the test on error.
func FreeAddrs(t testing.TB, ip string, n int) []string {
	t.Helper()
	addrs, err := FindFreeAddrs(ip, n)
	if err != nil {
		t.Fatal(err)
	}
	return addrs
}

// Listen listens on a free port of 127.0.0.1; the listener is closed when
// the test ends.
func Listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}
