package ensemble

import (
	"context"
	"net"
	"time"
)

// checkAddrs refuses a port left empty, which would bind a random one,
// and a peer address that is not this member's entry in the peer list:
// the others dial the entry, so unless something forwards it here (a
// proxy, a NAT's port mapping: PeerForwarded says so) raft would run with
// a member no one reaches. Host names are compared by what they resolve
// to. One that does not resolve here is only a warning: a configuration
// error (exit 64) would stop systemd's restarts, while name service may
// come up after the member; the start then fails on the lookup itself
// (startRaft resolves the entry) and is tried again.
func (c *Config) checkAddrs() error {
	for _, a := range []struct{ field, flag, addr string }{
		{"ClientAddr", "client address", c.ClientAddr},
		{"PeerAddr", "peer address", c.PeerAddr},
	} {
		if a.field == "ClientAddr" && c.ClientListener != nil || a.field == "PeerAddr" && c.PeerListener != nil {
			continue
		}
		_, port, err := net.SplitHostPort(a.addr)
		if err != nil {
			return configError(a.field, "%s %q: want host:port", a.flag, a.addr)
		}
		if port == "" {
			return configError(a.field, "%s %q has no port (an empty port would bind a random one)", a.flag, a.addr)
		}
	}
	adv := c.advertised()
	if len(c.Peers) == 0 || adv == "" || c.PeerListener != nil || c.PeerForwarded {
		return nil
	}
	bindHost, bindPort, _ := net.SplitHostPort(c.PeerAddr)
	advHost, advPort, err := net.SplitHostPort(adv)
	if err != nil {
		return nil // ParsePeers checked it; an in-code Config may hold anything
	}
	ip := net.ParseIP(bindHost)
	wildcard := bindHost == "" || ip != nil && ip.IsUnspecified()
	same := bindPort == advPort
	if same && !wildcard && bindHost != advHost {
		var known bool
		same, known = sameHost(bindHost, advHost)
		if !known {
			c.Logger.Warn("cannot tell whether the peer address is this member's entry in the peer list: a host name does not resolve here",
				"peer_addr", c.PeerAddr, "entry", c.ID+"="+adv)
			return nil
		}
	}
	if !same {
		return configError("PeerAddr", "peer address %s is not this member's entry %s=%s in the peer list, which the other members dial: "+
			"make them the same (or bind every interface, 0.0.0.0:%s); if a proxy or port mapping forwards %s to %s, say so with --peer-forwarded",
			c.PeerAddr, c.ID, adv, advPort, adv, c.PeerAddr)
	}
	return nil
}

// sameHost reports whether two hosts share an address; known is false
// when either does not resolve within a short wait.
func sameHost(a, b string) (same, known bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	as, err := net.DefaultResolver.LookupHost(ctx, a)
	if err != nil {
		return false, false
	}
	bs, err := net.DefaultResolver.LookupHost(ctx, b)
	if err != nil {
		return false, false
	}
	for _, x := range as {
		for _, y := range bs {
			if net.ParseIP(x).Equal(net.ParseIP(y)) {
				return true, true
			}
		}
	}
	return false, true
}
