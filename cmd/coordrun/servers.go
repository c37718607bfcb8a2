package main

import (
	"errors"

	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/spf13/viper"
)

// defaultClientPort is ZooKeeper's client port, which its own clients
// assume when a server is given without one.
const defaultClientPort = "2181"

// parseServers checks --servers before anything is dialled: a syntax
// error retried for the connect timeout would end as "unreachable" (69,
// try again later) when only the command line can fix it (64, at once).
// An entry without a port gets 2181, as ZooKeeper's clients do. Entries
// of another engine's scheme (etcd://) are left to that engine; zk:// is
// taken off.
func parseServers(s string) ([]string, error) {
	entries := splitServers(s)
	if len(entries) == 0 {
		return nil, errors.New("--servers is empty: give host:port,... (COORDRUN_SERVERS, or servers: in the config file)")
	}
	out := make([]string, 0, len(entries))
	for _, e := range entries {
		if strings.HasPrefix(e, "etcd://") {
			out = append(out, e)
			continue
		}
		// zk:// says outright what no scheme means: the ZooKeeper protocol.
		addr, err := serverAddr(strings.TrimSuffix(strings.TrimPrefix(e, "zk://"), "/"))
		if err != nil {
			return nil, fmt.Errorf("--servers entry %q: %w", e, err)
		}
		out = append(out, addr)
	}
	return out, nil
}

// serverAddr is one --servers entry as host:port, or why it is not one.
func serverAddr(e string) (string, error) {
	if i := strings.Index(e, "://"); i >= 0 {
		return "", fmt.Errorf("a URL; give host:port without %s://, as %s", e[:i], strings.TrimSuffix(e[i+3:], "/"))
	}
	if strings.ContainsAny(e, "/?#@ ") {
		return "", errors.New("want host:port, as 10.0.0.1:2181 or [::1]:2181")
	}
	host, port, err := net.SplitHostPort(e)
	if err != nil {
		// No port: host, or [v6]. A bare IPv6 address is ambiguous
		// (is its last group a port?), so it must be bracketed.
		if strings.Count(e, ":") > 1 && !strings.HasPrefix(e, "[") {
			return "", fmt.Errorf("an IPv6 address goes in brackets: [%s]:%s", e, defaultClientPort)
		}
		if strings.Contains(e, ":") && !strings.HasSuffix(e, "]") {
			return "", errors.New("want host:port, as 10.0.0.1:2181 or [::1]:2181")
		}
		host = strings.TrimSuffix(strings.TrimPrefix(e, "["), "]")
		port = defaultClientPort
	}
	if host == "" {
		return "", errors.New("no host; want host:port, as 127.0.0.1:2181")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("port %q is not a number from 1 to 65535", port)
	}
	return net.JoinHostPort(host, port), nil
}

// defaultServersHint is what to add to "no member answered" when nobody
// said where the members are: the default address was tried, which on a
// client host is rarely where they run.
func defaultServersHint(v *viper.Viper) string {
	if v.IsSet("servers") {
		return ""
	}
	return " (no --servers given, so the default 127.0.0.1:2181 was tried: give the members with --servers, COORDRUN_SERVERS or servers: in the config file)"
}
