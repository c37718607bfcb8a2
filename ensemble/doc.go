// Package ensemble is one member of a coordrun ensemble: a ZooKeeper-style
// coordination service replicated with hashicorp/raft.
//
// A member owns the raft node (log and stable store in raft-boltdb, file
// snapshots), the FSM adapter over ensemble/tree, the ZooKeeper client
// listener, the watch manager, and — while it leads — the session tracker
// that alone expires sessions. Followers forward writes to the leader and
// relay session liveness to it.
package ensemble
