// Package testkit is what the tests of every package share: an in-process
// ensemble (Cluster; its ensembletest package binds it to coordrun
// members), the layout and processes of an ensemble of the real binary
// (ProcessEnsemble, Process, Binary), waiting for a condition (WaitFor,
// Poll), a goroutine-safe buffer (SyncBuffer), a throwaway certificate
// authority (CA), one fault-injecting TCP proxy (Proxy), free loopback
// addresses (FreeAddrs), and a go-zookeeper dialer (DialZK). The Apache
// ZooKeeper launcher is its zookeeper package. Four-letter words are
// client.FourLetter.
//
// Only tests and the test harnesses (internal/chaos) import it. It
// imports neither the member nor the client, so that the in-package
// tests of both can use it: binding to the member is ensembletest's, and
// the ZooKeeper launcher is handed client.FourLetter.
package testkit
