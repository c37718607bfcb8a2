// Package ensemble is one member of a coordrun ensemble: a ZooKeeper-style
// coordination service replicated with hashicorp/raft.
//
// A member owns the raft node (log and stable store in raft-boltdb, file
// snapshots), the FSM adapter over ensemble/tree, the ZooKeeper client
// listener, the watch manager, and — while it leads — the session tracker
// that alone expires sessions. Followers forward writes to the leader and
// relay session liveness to it. What a ZooKeeper request means is package
// ensemble/zk's; this package moves requests, replies and transactions
// between sockets, raft and the tree.
//
// # Files
//
//	member.go      Member: Start, Close and every exported method
//	raft.go        raft wiring, the FSM's callbacks, proposing as leader
//	fsm.go         the raft FSM over the tree; view is the only way in
//	leader.go      leaderCall, where leader-only requests run; the peer handlers
//	clients.go     the client port: accept, four-letter words, the connection set
//	accept.go      the accept loop both ports share: retry, never give up
//	limits.go      bounds on what one client can make the member hold
//	handshake.go   a connection's session handshake
//	conn.go        a connection: reader, sequencer; connwrite.go its writer
//	watch.go       the watch manager
//	session.go     session deadlines, the liveness relay, expiry
//	peer.go        the peer port, split between raft and member RPCs
//	peerauth.go    peer TLS minted from the ensemble secret; peergate.go
//	               which member ids may use the peer port
//	peerhealth.go  which peers answer raft's calls, logged as it changes
//	rpc.go         member RPC frames, codes, serving and calling, the pool
//	commitpush.go  telling followers of commits without waiting for raft's timer
//	stats.go       requestStats, the one observer of the request path
//	metrics.go     Prometheus, read from requestStats and the member's getters
//	fourletter.go  the four-letter words: the figures each reports, which
//	               zk renders in ZooKeeper's layouts (fourletter_mntr.go:
//	               mntr's; fourletter_allow.go: which are answered);
//	               procinfo.go what they report of the process and machine
//	status.go      the status report (mbrs, `coordrun ensemble status`)
//	membership.go  membership changes; backup.go snapshots to and from files
//	adminid.go     who is the super user, who may reconfigure and snapshot
//	adminsock.go   the admin socket: the client protocol for local admins;
//	               adminsock_linux.go, adminsock_other.go its peer uid check
//	sessionowner.go  sessions touched and relayed only by their connections
//	admin.go       the admin HTTP listener; adminaccess.go who it answers;
//	               webstatus.go what its status page (ensemble/statuspage)
//	               reads of the member
//	goroutines.go  the tracker every goroutine starts through; kick, broadcast
//	config.go, tls.go, certid.go   configuration, TLS, certificate identities
//	addrcheck.go, peerscheck.go, storecheck.go   refusals at start: empty
//	               or mismatched addresses, a peer list the data dir
//	               contradicts, a damaged data dir
//	raftlog.go     raft's hclog lines as the member's slog records
//	future.go      waiting for a raft future that a shutdown may leave unanswered
//
// # A request's path
//
// A client connects: acceptClients (clients.go) hands the socket to
// serveClient, which answers a four-letter word (fourLetter) or a snapshot
// (streamSnapshot) and closes, or reads the connect frame and runs
// connEnv.handshake (handshake.go). That creates the session through
// submit (a TxnCreateSession, like any write below) or looks it up in a
// view, registers the connection (clientSet.register), waits for the
// leader to acknowledge the session's liveness (noteLive, waitLive) and
// queues the connect reply. conn.run then starts the writer and the
// sequencer and becomes the reader.
//
// The reader (conn.readLoop) reads a frame (wire.ReadFrame), notes the
// session live (noteLive: the leader records it at once, a follower
// through the livenessRelay) and starts the request (conn.start): it
// decodes it (zk.Decode) and, by its zk.Kind, begins it:
//
//   - a write: conn.startWrite plans it (zk.PlanWrite: validation, then a
//     tree.Txn, or an early answer), trims the txn's identities to those
//     its ACL checks can consult (zk.NeededAuth, in a view; only for a
//     connection holding more than carryAllAuth) and hands the txn to submit
//     (leader.go) at once, so a connection's writes pipeline. submit runs
//     leaderCall: on the leader applyAsLeader stamps the txn and queues it
//     in the proposer (group.go), which packs the writes queued while
//     earlier groups commit into one raft entry (before the ensemble
//     groups, groupGate, it calls raft.Apply per txn); on a follower the txn goes to the leader as an
//     rpcPropose call (peerPool.get, rpcConn.start in rpc.go), where
//     peerMux.route and servePeer dispatch it by the peerHandlers table to
//     servePropose, which calls applyAsLeader on the read loop, in order.
//   - a read: its slot keeps the request and the identities it was read
//     with; it runs later, on the sequencer.
//   - ping, auth (zk.Auth), closeSession, sync, reconfig and unknown
//     opcodes get a slot that builds their reply.
//
// The slot goes to the sequencer's queue (maxPipelined deep; the reader
// stops when it is full).
//
// Raft commits the entry and calls fsm.ApplyBatch on every member, which
// applies each of its txns, with a zxid of its own, to the tree (tree.Apply) under the write lock and calls
// Member.afterApply (raft.go): watchManager.trigger fires the watches the
// change events concern (zk.Fires; the READ check against each
// connection's identities; zk.NotificationFrame) and queues the
// notifications on their connections (conn.notifyFrame, push) before any
// later read can see the change; a session's end closes its connection.
//
// The sequencer (conn.sequence, conn.deliver) finishes slots strictly in
// request order. A read first waits until this member applied the
// session's own last write (waitApplied); a request whose liveness went
// through the relay waits for the leader's acknowledgement of it
// (waitLive), so that its reply is a lease proof. A read then runs in a
// view of the tree (fsm.view, conn.runCurrent): zk.Read returns the reply
// frame, the watches to register and the notifications setWatches sends
// at once, which runRead acts on before the reply is queued, all within
// the view. A write's slot waits for its outcome (waitApply on the leader,
// the rpcPropose reply, decodeProposeReply, on a follower), for its apply
// here when the connection has watches, and builds the reply from the
// outcome (zk.Plan.Reply). conn.reply raises the reply's zxid to the
// session's last write (wire.PatchReplyZxid), queues it (conn.push, which
// closes a connection whose queue exceeds maxQueuedReplyBytes) and
// records it (requestStats.observe); requestStats.stage records the time
// a write spent in each stage on the way (stats.go names them). The writer (conn.writeLoop) sends
// whatever is queued, notifications and replies in queue order.
//
// # Goroutines
//
// Every goroutine of a member is started through its tracker (m.tr), and
// Close returns only once all have ended. Close ends their reasons to run:
// it cancels the member's context, closes the client listener, every
// client connection (accepted or established) and the admin listener,
// shuts raft down (closeRaft) and closes the peer pool, the commit pusher,
// the transport and the peer mux with its connections.
//
//   - acceptClients: one per member, until the client listener closes.
//   - serveClient: one per accepted client connection; it runs the
//     handshake and then is the connection's reader.
//   - conn.writeLoop and conn.sequence: two per established connection,
//     joined by conn.run.
//   - expireLoop: one per member; while leading, it expires sessions past
//     their deadline after raft's VerifyLeader, proposing each expiry on
//     a goroutine of its own.
//   - idleLockLoop: one per member with RemoveIdleLocks; while leading, it
//     removes lock folders left empty for that long (idlelocks.go).
//   - proposer.runForm and proposer.runAnswer: one each per member; while
//     it leads, the first forms group entries and hands them to raft, the
//     second answers their writes in log order.
//   - groupGate: one per member until the log holds a group entry; while
//     leading, it asks the others whether they read group entries.
//   - livenessRelay.run: one per member; it sends batches of live sessions
//     to the leader (sendTouch), one batch in flight.
//   - peerMux.serve: one per member, accepting on the peer port; route, one
//     per accepted peer connection, reads its first byte and hands it to
//     raft or becomes servePeer's read loop for member RPCs.
//   - serveRPC's finishers: one per member RPC served, awaiting its answer.
//   - frameWriter: one per member RPC connection, on either side, sending
//     queued frames in batches; rpcConn.readLoop: one per connection this
//     member dialed, handing replies to their calls.
//   - commitPusher.run: on the leader, one per follower, pushing the commit
//     index; pushPipeline.forward: one per raft replication pipeline,
//     noting follower progress.
//   - ensembleStatus: one per member of the configuration while a status
//     is gathered; followerSync (mntr on a leader) likewise, asking each
//     follower for its status.
//   - peerHealth.run: one per member, logging which peers answer raft.
//   - acceptAdminSocket: one per member with an admin socket; serveClient
//     for each connection it admits, and refuse, which tells a refused
//     one why before closing it.
//   - Live: one per health check, taking a view of the state machine.
//   - the admin HTTP server's Serve, and the status page's sampler
//     (statuspage.Server.Run), when Config.AdminAddr is set.
//
// Three raw go statements start goroutines outside the tracker: the
// tracker's own (goroutines.go); the feeder of latencySummaries
// (fourletter_mntr.go), which ends when the histogram's Collect returns
// and is joined by reading its channel to the close; and the waiter of
// await (future.go), used for VerifyLeader and the grouping switch's Apply:
// the one goroutine a Close can leave behind, blocked on a future raft
// queued as it shut down and never answers.
//
// Raft runs goroutines of its own (and joins them in Shutdown), as does
// net/http for admin requests. The TLS handshake of an accepted connection
// (tls.go) runs on its first read, on the goroutine serving it.
package ensemble
