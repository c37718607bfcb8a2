// Package client is coordrun's Go client for the ZooKeeper wire protocol.
// It works against a coordrun ensemble and against Apache ZooKeeper 3.5+.
//
// # Concepts
//
//   - A Client owns one session. It keeps one TCP connection to one member
//     at a time, and when that connection breaks or the member falls
//     silent it reconnects to another member, resuming the same session
//     (see Failover).
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
// # Failover
//
// A member cut off by the network often sends nothing at all, not even a
// reset, so the client judges a connection by its answers: when the
// oldest unanswered packet, if a ping, has waited a sixth of the
// negotiated timeout, and if a request (which may wait for a quorum
// round), a quarter, with no byte arriving meanwhile, the member is given
// up; in no case before 750ms. A connection that delivers nothing for two
// thirds of the timeout is given up too. Pings go out every Config.PingInterval
// whatever else is outstanding, so an idle connection is judged as soon
// as a ping of its goes unanswered.
//
// Reconnecting races the members for the session, in a shuffled round
// robin order with the member just lost last: one handshake starts, the
// next joins it when the earlier ones have not completed within a
// twentieth of the timeout, or at once when one fails; the first that
// completes wins and the others are abandoned, their sockets reset. A
// member that says the session expired ends it (StateExpired), unless
// another member has already resumed it; a member that refuses (it is
// behind the client's last zxid, or cannot reach the leader) only makes
// the next one start. Each attempt may take as long as the lease lasts,
// and at least a third of the timeout. Connect races the members the
// same way for a new session; a second session created by a losing
// attempt is closed at once.
//
// Two handshakes of one session can make Apache ZooKeeper move the session
// to the slower member, which then rejects the winner's requests with
// SESSIONMOVED. The stagger makes that rare; when it happens the client
// reconnects, and sends again the requests so rejected (ZooKeeper rejects
// them before applying anything), so callers do not see it.
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
