package client

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/coordrun/coordrun/ensemble/wire"
)

// Errors returned by the client itself. Server errors are wire.Code values
// (wrapped with the operation and path), so errors.Is(err, wire.ErrNoNode)
// works on them.
var (
	// ErrConnectionLoss: the connection broke while the request was
	// outstanding, so its outcome is unknown. It also satisfies
	// errors.Is(err, wire.ErrConnectionLoss).
	ErrConnectionLoss error = &codeError{msg: "client: connection lost with the request outstanding", code: wire.ErrConnectionLoss}
	// ErrSessionExpired: the server no longer knows the session. Final:
	// Done is closed and Err returns it. It also satisfies
	// errors.Is(err, wire.ErrSessionExpired).
	ErrSessionExpired error = &codeError{msg: "client: session expired", code: wire.ErrSessionExpired}
	// ErrClosed: Close was called. Final.
	ErrClosed = errors.New("client: closed")
	// ErrLeaseExpired is carried by a StateEvent of a Suspended client whose
	// own lease deadline has passed. It is a report, not a final state: the
	// session may still live on the server, which alone decides expiry.
	ErrLeaseExpired = errors.New("client: lease passed while disconnected")
	// ErrProtocol: the server sent something this client cannot accept (a
	// reply out of order, a malformed record); the connection is dropped.
	ErrProtocol = errors.New("client: protocol violation by server")
)

// codeError is a client-side error that also matches a ZooKeeper code.
type codeError struct {
	msg  string
	code wire.Code
}

func (e *codeError) Error() string { return e.msg }
func (e *codeError) Unwrap() error { return e.code }

// codeErr turns a reply header's code into the error an operation returns:
// nil for OK, the client's sentinels for the session codes, the code itself
// otherwise.
func codeErr(c wire.Code) error {
	switch c {
	case wire.OK:
		return nil
	case wire.ErrConnectionLoss:
		return ErrConnectionLoss
	case wire.ErrSessionExpired:
		return ErrSessionExpired
	}
	return c
}

func opError(op int32, path string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s %s: %w", wire.OpName(op), path, err)
}

// State is the client's view of its session.
type State int32

const (
	// StateConnected: a connection is up and the session is established.
	StateConnected State = iota + 1
	// StateSuspended: no connection; the client is reconnecting and the
	// session may still live on the server.
	StateSuspended
	// StateExpired: the server reported the session gone. Final.
	StateExpired
	// StateClosed: Close was called. Final.
	StateClosed
)

func (s State) String() string {
	switch s {
	case StateConnected:
		return "connected"
	case StateSuspended:
		return "suspended"
	case StateExpired:
		return "expired"
	case StateClosed:
		return "closed"
	}
	return fmt.Sprintf("State(%d)", int32(s))
}

// StateEvent reports a state change. Lease is the lease deadline when the
// event was emitted; Err is the cause (the connection error for Suspended,
// ErrLeaseExpired when a suspended client's lease passed, ErrSessionExpired
// or ErrClosed for the final states).
type StateEvent struct {
	State  State
	Server string
	Lease  time.Time
	Err    error
}

// EventNotWatching is the Event.Type delivered on a watch channel when the
// watch ends without firing: the session was lost, the client was closed,
// or the server refused to re-arm it after a reconnect. Event.Err says why.
const EventNotWatching int32 = -2

// Event is the one delivery of a watch: Type is one of wire.EventNode* or
// EventNotWatching. Every watch has its own channel of capacity 1 that
// receives exactly one Event, so delivery never blocks the client and an
// unread channel holds nothing else up. Events are delivered in wire order:
// a notification reaches its channel before the caller of a later request
// gets that request's reply.
type Event struct {
	Type int32
	Path string
	Err  error
}

// OpenACL grants everything to everyone (world:anyone, cdrwa).
var OpenACL = []wire.ACL{{Perms: wire.PermAll, ID: wire.ID{Scheme: "world", ID: "anyone"}}}

// Auth is one credential added to every connection of the session, e.g.
// {"digest", []byte("user:pass")}.
type Auth struct {
	Scheme string
	Secret []byte
}

// Config configures Connect. Zero optional fields take the defaults noted.
type Config struct {
	// Servers are the members' host:port addresses, tried in a shuffled
	// round robin.
	Servers []string
	// SessionTimeout is the requested timeout (default 10s); the server
	// clamps it into its own bounds, see Client.SessionTimeout.
	SessionTimeout time.Duration
	// PingInterval is how often a connection pings (default, and at most,
	// a third of the negotiated timeout). Every ping reply renews the lease.
	PingInterval time.Duration
	// DialTimeout bounds a TCP dial (default 2s). It also bounds how long
	// Close waits for the server's reply to closeSession.
	DialTimeout time.Duration
	// Auth is sent after the handshake of every connection.
	Auth []Auth
	// TLS, when set, makes every connection TLS (the handshake counts
	// against DialTimeout). An empty ServerName verifies each server
	// against the host part of its address in Servers. Nil: plaintext.
	TLS *tls.Config
	// Logger receives connection-level diagnostics (default: discarded).
	Logger *slog.Logger
	// Now is the clock for lease math (default time.Now).
	Now func() time.Time

	hooks *testHooks
}

// testHooks lets this package's tests observe lease proofs.
type testHooks struct {
	// onProof is called for every reply that proves liveness, with the
	// packet's send stamp, the timeout it was proven for and the lease
	// afterwards. It runs on the reader goroutine.
	onProof func(sent time.Time, timeout time.Duration, lease time.Time)
}

const (
	defaultSessionTimeout = 10 * time.Second
	defaultDialTimeout    = 2 * time.Second
	// maxReplyFrame bounds a reply frame. ZooKeeper's replies can exceed
	// its 1 MiB request limit (a full node plus its stat), and a large
	// child list is bigger still.
	maxReplyFrame = 16 << 20
)

func (cfg Config) withDefaults() (Config, error) {
	if len(cfg.Servers) == 0 {
		return cfg, errors.New("client: no servers configured")
	}
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = defaultSessionTimeout
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = defaultDialTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Servers = append([]string(nil), cfg.Servers...)
	cfg.Auth = append([]Auth(nil), cfg.Auth...)
	return cfg, nil
}
