package client

import "strings"

// UnixPrefix marks a server address that is a Unix socket path, such as a
// member's admin socket: "unix:/run/coordrun/admin.sock". Such a server is
// dialed without TLS: the socket is local, and the member authenticates
// its peer by uid instead.
const UnixPrefix = "unix:"

// splitNetwork returns the network and address to dial for a server.
func splitNetwork(server string) (network, addr string) {
	if p, ok := strings.CutPrefix(server, UnixPrefix); ok {
		return "unix", p
	}
	return "tcp", server
}
