// Package testkit is what the tests of every package share: an in-process
// ensemble (Cluster, bound to the member by the ensembletest package),
// the members of a process ensemble of the real binary (Server), waiting
// for a condition (WaitFor), a goroutine-safe buffer, a throwaway
// certificate authority, one fault-injecting TCP proxy, free loopback
// addresses, and a go-zookeeper dialer. The Apache ZooKeeper launcher is
// its zookeeper package.
//
// Only tests and the test harnesses (internal/chaos) import it. It
// imports neither the member nor the client, so that the in-package
// tests of both can use it; what needs them lives in the subpackages.
package testkit
