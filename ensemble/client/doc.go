// Package client is coordrun's Go client for the ZooKeeper wire protocol.
// It works against a coordrun ensemble and against Apache ZooKeeper 3.5+.
//
// # Concepts
//
//   - A Client owns one session. It keeps one TCP connection to one member
//     at a time, and reconnects to the next member (shuffled round robin)
//     when that connection breaks, resuming the same session.
//   - Requests are pipelined: any number of goroutines may call operations
//     at once; they are written in the order they are queued and their
//     replies are matched by xid in FIFO order.
//   - State: Connected, Suspended (no connection; the session may live on
//     the server), and the final states Expired and Closed. Every change is
//     reported on Events; Done is closed on a final state.
//   - The lease: the latest moment until which the server has proven the
//     session alive. Lease and LeaseUpdates publish it.
//   - Watches are one-shot and re-armed on every reconnect.
//
// # The lease
//
// The client stamps every request, ping and ConnectRequest with Config.Now
// just before writing it. A reply to a packet stamped t proves that the
// session lives on the server until at least t + the negotiated timeout:
// the server received the packet after t and restarts the session's
// timeout on receipt. So the lease is the maximum of t + timeout over all
// answered packets. Notifications prove nothing, nor do replies that carry
// a session error or answer closeSession.
//
// Against coordrun the proof is sound across members: a member answers a
// request or ping only after the leader, which alone expires sessions, has
// acknowledged hearing of the session at or after the packet arrived.
// Against Apache ZooKeeper a follower answers pings on its own and relays
// session liveness to the leader later, so a reply from a follower cut off
// from the leader is not a proof; callers should keep a wider margin there
// (several ticks). In both cases the lease is measured on the client's
// clock: callers acting on it must also subtract their allowance for clock
// rate drift between client and server.
//
// # Caveats
//
//   - An operation that returns ErrConnectionLoss or a context error may or
//     may not have been applied, and may become visible only later: a read
//     on the next connection can miss a write that was still in flight on
//     the old one. Call Sync before reading to find out.
//   - Requests queued while Suspended wait for the next connection (or
//     their context); they are not failed merely because no connection is
//     up. Requests already written when a connection breaks fail with
//     ErrConnectionLoss.
//   - Only the server decides expiry. A Suspended client keeps trying to
//     reconnect after its own lease has passed; it reports the passing with
//     a StateEvent carrying ErrLeaseExpired, and learns of expiry when a
//     member rejects the session on reconnect.
package client
