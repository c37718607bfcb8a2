// Package difftest is a differential tester: it plays seeded random
// sequences of ZooKeeper requests against Apache ZooKeeper 3.8 and a
// coordrun member over raw TCP, and compares everything a client can
// observe, normalised so that only real differences remain.
//
// A sequence is a list of Ops on two or three sessions under a fresh root
// (/dt-<n>), issued one at a time in a fixed global order. After each op
// every session answers a barrier request, so a watch event lands at a
// fixed place in its session's trace. Traces hold reply codes, data
// (null, empty and filled kept apart), sorted children, created names,
// ACLs, identities, the Stat fields that must agree exactly, zxids by
// their order within the run, ephemeral owners as session ordinals, watch
// events, multi results, and for malformed input whether the server
// answered and kept the connection.
//
// When the traces part, the tester shrinks the sequence (delta debugging)
// to a short reproduction. Differences that are meant are listed in
// KnownDifferences, each quoting the Compatibility notes (docs/compatibility.md).
//
// The tests in this package run it: a short seeded pass inside make test,
// and make difftest for long runs (see the Makefile).
package difftest
