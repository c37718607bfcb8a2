package ensemble

import (
	"bytes"
	"crypto/tls"
	"net"
	"strconv"
	"sync"
	"time"
)

// dupIDDialTimeout bounds each look at another member's peer port at
// start; the looks run at once, so a start waits at most this long.
const dupIDDialTimeout = 2 * time.Second

// refuseDuplicateID looks, before the data dir is touched, at the peer
// port of every other entry of the peer list and refuses to start when
// one of them is already serving with this member's id. Two members with
// one id would both serve: raft takes the second for whichever member's
// address it listens on, and every status reads healthy. Only the
// ensemble secret proves an id (each member's certificate names it,
// peerauth.go); with other peer credentials there is nothing to compare.
// The one that starts second is refused, so a running member is never
// taken down by a misconfigured newcomer.
func (m *Member) refuseDuplicateID(pt *peerTLS, own net.Addr) error {
	if m.cfg.PeerSecret == nil || pt == nil || pt.dial == nil {
		return nil
	}
	var targets []string
	for _, p := range m.cfg.Peers {
		if !sameAddr(p.Addr, own) && p.Addr != m.cfg.PeerAddr {
			targets = append(targets, p.Addr)
		}
	}
	// An entry may still be this member under another name (a host
	// name, a forwarded port): its own certificate tells.
	var mine []byte
	if pt.dial.GetClientCertificate != nil {
		if own, err := pt.dial.GetClientCertificate(nil); err == nil && len(own.Certificate) > 0 {
			mine = own.Certificate[0]
		}
	}
	found := make([]string, len(targets))
	var wg sync.WaitGroup
	for i, addr := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			found[i] = servingID(pt, addr, mine)
		}()
	}
	wg.Wait()
	for i, id := range found {
		if id == m.cfg.ID {
			return configError("ID", "member %s is already serving at %s, and this one was started with the same --id at %s: "+
				"two members with one id would both serve, raft mistaking one for another; give each member its own id, its entry in --peers",
				id, targets[i], m.cfg.PeerAddr)
		}
	}
	return nil
}

// servingID is the member id that the peer port at addr proves in its
// certificate, or "" when nothing there answers as a member or what
// answers shows mine, this member's own certificate.
func servingID(pt *peerTLS, addr string, mine []byte) string {
	c, err := pt.dialTimeout(addr, dupIDDialTimeout)
	if err != nil {
		return ""
	}
	defer c.Close()
	tc, ok := c.(*tls.Conn)
	if !ok {
		return ""
	}
	st := tc.ConnectionState()
	if len(st.PeerCertificates) == 0 || bytes.Equal(st.PeerCertificates[0].Raw, mine) {
		return ""
	}
	return st.PeerCertificates[0].Subject.CommonName
}

// sameAddr reports whether addr (host:port) names the listener address
// own: the same port, and the same host or own's wildcard.
func sameAddr(addr string, own net.Addr) bool {
	ta, ok := own.(*net.TCPAddr)
	if !ok {
		return false
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port != strconv.Itoa(ta.Port) {
		return false
	}
	ip := net.ParseIP(host)
	return ta.IP.IsUnspecified() || ip != nil && ip.Equal(ta.IP)
}
