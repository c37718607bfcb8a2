package etcdengine

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/coordrun/coordrun/supervisor/engine"
)

// Scheme starts every etcd member in --servers: etcd://host:port.
const Scheme = "etcd://"

// DefaultPrefix is where coordrun keeps its keys unless told otherwise.
const DefaultPrefix = "/coordrun/"

// DefaultPort is etcd's client port, for a member named without one.
const DefaultPort = "2379"

// MinVersion is the oldest etcd server the engine works with: 3.4 has
// every request it makes (compares on key ranges, IgnoreLease, nested
// transactions and lease TimeToLive).
var MinVersion = [2]int{3, 4}

// ConfigError is a refusal caused by the invocation or by the cluster's
// setup (a malformed address, wrong credentials, a missing permission, a
// server too old), which retrying will not cure: coordrun exits 64.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

func configErr(format string, a ...any) error {
	return &ConfigError{Err: fmt.Errorf(format, a...)}
}

// IsEtcd reports whether a --servers value names etcd members.
func IsEtcd(servers string) bool {
	return strings.HasPrefix(strings.TrimSpace(servers), Scheme)
}

// ParseServers reads a --servers value of etcd members,
// "etcd://host:port,etcd://host:port" (later members may leave out the
// scheme), into host:port endpoints.
func ParseServers(servers string) ([]string, error) {
	var eps []string
	for _, s := range strings.Split(servers, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if !strings.Contains(s, "://") {
			s = Scheme + s
		}
		u, err := url.Parse(s)
		if err != nil {
			return nil, configErr("--servers: %q is not etcd://host:port: %v", s, err)
		}
		switch {
		case u.Scheme != "etcd":
			return nil, configErr("--servers: %q: every member of an etcd cluster is etcd://host:port (one engine per invocation)", s)
		case u.User != nil:
			return nil, configErr("--servers: %q: credentials go in --auth user:password, not in the address", s)
		case u.Path != "" && u.Path != "/", u.RawQuery != "", u.Fragment != "":
			return nil, configErr("--servers: %q has a path or query; give etcd://host:port and the key prefix with --prefix", s)
		case u.Hostname() == "":
			return nil, configErr("--servers: %q names no host", s)
		}
		port := u.Port()
		if port == "" {
			port = DefaultPort
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, configErr("--servers: %q: port %q is not a number from 1 to 65535", s, port)
		}
		eps = append(eps, net.JoinHostPort(u.Hostname(), port))
	}
	if len(eps) == 0 {
		return nil, configErr("--servers: no etcd member named")
	}
	return eps, nil
}

// NormalizePrefix checks a --prefix and gives it its trailing slash.
func NormalizePrefix(p string) (string, error) {
	switch {
	case p == "":
		return DefaultPrefix, nil
	case !strings.HasPrefix(p, "/"):
		return "", configErr("--prefix %q: a key prefix starts with / (as %s does)", p, DefaultPrefix)
	case strings.Contains(p, "//"), strings.ContainsAny(p, "\x00\n"):
		return "", configErr("--prefix %q: no empty path elements or control characters", p)
	}
	if !strings.HasSuffix(p, "/") {
		p += "/"
	}
	return p, nil
}

// Config is how to reach etcd and what the session is.
type Config struct {
	Endpoints []string // host:port
	// TLS, if set, is used for every member (https); nil: plain.
	TLS *tls.Config
	// Username and Password: etcd's user authentication, if set.
	Username, Password string
	// Prefix is where every key lies (DefaultPrefix if empty). The
	// session's user needs read and write on it.
	Prefix string
	// SessionTimeout is the lease's TTL, rounded up to whole seconds.
	SessionTimeout time.Duration
	// ReadOnly: check only that the user may read under the prefix (the
	// inspecting commands); else read and write.
	ReadOnly bool
	// DialTimeout bounds Dial (default 10 s).
	DialTimeout time.Duration
	Log         *slog.Logger
}

// Dial connects, checks the server's version, the credentials and the
// permissions on the prefix, and starts the session. A refusal is a
// *ConfigError; no member answering is engine.ErrUnreachable.
func Dial(ctx context.Context, cfg Config) (*Conn, error) {
	prefix, err := NormalizePrefix(cfg.Prefix)
	if err != nil {
		return nil, err
	}
	if len(cfg.Endpoints) == 0 {
		return nil, configErr("no etcd member named")
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = 10 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	scheme := "http://"
	if cfg.TLS != nil {
		scheme = "https://"
	}
	var eps []string
	for _, e := range cfg.Endpoints {
		eps = append(eps, scheme+e)
	}
	where := strings.Join(cfg.Endpoints, ",")
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   eps,
		TLS:         cfg.TLS,
		Username:    cfg.Username,
		Password:    cfg.Password,
		DialTimeout: cfg.DialTimeout,
		Context:     context.WithoutCancel(ctx),
		Logger:      zap.NewNop(),
		// The lease deadline is proven by our own renewals; gRPC's
		// keepalive only notices a dead connection sooner.
		DialKeepAliveTime:    cfg.SessionTimeout / 3,
		DialKeepAliveTimeout: cfg.SessionTimeout / 3,
	})
	if err != nil {
		return nil, dialErr(where, cfg.Username, err)
	}
	c := &Conn{cli: cli, endpoints: cfg.Endpoints, prefix: prefix, log: cfg.Log, updates: make(chan time.Time, 1), done: make(chan struct{}), check: make(chan struct{}, 1)}
	c.base, c.stop = context.WithCancel(context.Background())
	fail := func(err error) (*Conn, error) {
		c.stop()
		if c.lease != 0 {
			rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
			_, _ = cli.Revoke(rctx, c.lease)
			rcancel()
		}
		c.end(nil)
		c.wg.Wait()
		cli.Close()
		return nil, err
	}
	if err := checkVersion(ctx, cli); err != nil {
		return fail(dialErr(where, cfg.Username, fmt.Errorf("version: %w", err)))
	}
	if err := c.grant(ctx, cfg.SessionTimeout); err != nil {
		return fail(dialErr(where, cfg.Username, fmt.Errorf("lease grant: %w", err)))
	}
	if err := c.checkAccess(ctx, cfg.Username, cfg.ReadOnly); err != nil {
		return fail(err)
	}
	return c, nil
}

// dialErr classifies a failure to start: refused credentials are the
// invocation's fault, silence is the cluster's.
func dialErr(where, user string, err error) error {
	var ce *ConfigError
	switch {
	case errors.As(err, &ce):
		return err
	case errors.Is(err, rpctypes.ErrAuthFailed), errors.Is(err, rpctypes.ErrInvalidAuthMgmt):
		return configErr("etcd at %s refused user %q: wrong user name or password (--auth user:password): %v", where, user, err)
	case errors.Is(err, rpctypes.ErrAuthNotEnabled):
		return configErr("etcd at %s has authentication disabled: leave out --auth, or enable it (etcdctl auth enable)", where)
	case errors.Is(err, rpctypes.ErrUserEmpty), errors.Is(err, rpctypes.ErrInvalidAuthToken):
		return configErr("etcd at %s requires authentication: give --auth user:password", where)
	case errors.Is(err, rpctypes.ErrPermissionDenied):
		return configErr("etcd at %s: user %q lacks a permission coordrun needs: %v", where, user, err)
	}
	return fmt.Errorf("%w: no etcd member at %s answered: %w", engine.ErrUnreachable, where, err)
}

// checkVersion asks every member for its version at once (a dead one
// answers nothing until the deadline) and judges by the first answer: a
// server older than MinVersion is refused.
func checkVersion(ctx context.Context, cli *clientv3.Client) error {
	ctx, cancel := context.WithCancel(ctx)
	type answer struct {
		ep      string
		version string
		err     error
	}
	eps := cli.Endpoints()
	answers := make(chan answer, len(eps))
	var wg sync.WaitGroup
	for _, ep := range eps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := cli.Status(ctx, ep)
			a := answer{ep: ep, err: err}
			if err == nil {
				a.version = resp.Version
			}
			answers <- a
		}()
	}
	defer func() { cancel(); wg.Wait() }() // the others give up at once
	var last error
	for range eps {
		a := <-answers
		if a.err != nil {
			last = a.err
			continue
		}
		if !versionAtLeast(a.version, MinVersion) {
			return tooOld(strings.TrimPrefix(strings.TrimPrefix(a.ep, "http://"), "https://"), a.version)
		}
		return nil
	}
	return last
}

func tooOld(member, version string) error {
	return configErr("etcd at %s is version %s; coordrun needs etcd %d.%d or later", member, version, MinVersion[0], MinVersion[1])
}

// versionAtLeast compares an etcd version string ("3.4.23") with want.
func versionAtLeast(v string, want [2]int) bool {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return major > want[0] || major == want[0] && minor >= want[1]
}

// accessKey is written and deleted at Dial to prove write access to the
// prefix; its name cannot be a record's (no path element starts with
// NUL).
func (c *Conn) accessKey() string { return c.prefix + "\x00access-check-" + c.ID() }

// checkAccess proves that the session may read and write under the
// prefix, so that a missing permission is told at start, naming the key
// and the permission, rather than as a lock that never comes.
func (c *Conn) checkAccess(ctx context.Context, user string, readOnly bool) error {
	fix := func(what string) error {
		who := "this client"
		if user != "" {
			who = fmt.Sprintf("etcd user %q", user)
		}
		return configErr("%s may not %s: grant one of its roles readwrite on the prefix (etcdctl role grant-permission ROLE --prefix=true readwrite %s), or choose a prefix it may use with --prefix",
			who, what, c.prefix)
	}
	where := strings.Join(c.endpoints, ",")
	if _, err := c.cli.Get(ctx, c.prefix, clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil {
		if errors.Is(err, rpctypes.ErrPermissionDenied) {
			return fix(fmt.Sprintf("read the keys under the prefix %s (range %q to %q)", c.prefix, c.prefix, clientv3.GetPrefixRangeEnd(c.prefix)))
		}
		return dialErr(where, user, err)
	}
	if readOnly {
		return nil
	}
	key := c.accessKey()
	if _, err := c.cli.Put(ctx, key, "", clientv3.WithLease(c.lease)); err != nil {
		if errors.Is(err, rpctypes.ErrPermissionDenied) {
			return fix(fmt.Sprintf("write key %q under the prefix %s", c.accessKey(), c.prefix))
		}
		return dialErr(where, user, err)
	}
	if _, err := c.cli.Delete(ctx, key); err != nil {
		return dialErr(where, user, err)
	}
	return nil
}
