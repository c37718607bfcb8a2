package ensemble

import (
	"net"
)

// checkAddrs refuses a port left empty, which would bind a random one,
// and says so when the peer address is not this member's entry in the
// peer list: the others dial the entry, so unless something forwards it
// here (a proxy, a NAT's port mapping, which is why this is a warning and
// not a refusal) raft runs with a member no one reaches.
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
	if len(c.Peers) == 0 || adv == "" || c.PeerListener != nil {
		return nil
	}
	bindHost, bindPort, _ := net.SplitHostPort(c.PeerAddr)
	advHost, advPort, err := net.SplitHostPort(adv)
	if err != nil {
		return nil // ParsePeers checked it; an in-code Config may hold anything
	}
	ip := net.ParseIP(bindHost)
	wildcard := bindHost == "" || ip != nil && ip.IsUnspecified()
	if bindPort != advPort || !wildcard && bindHost != advHost {
		c.Logger.Warn("the peer address is not this member's entry in the peer list, which the other members dial: "+
			"unless a proxy or port mapping forwards the entry here, make them the same or bind every interface",
			"peer_addr", c.PeerAddr, "entry", c.ID+"="+adv)
	}
	return nil
}
