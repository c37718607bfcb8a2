package ensemble

import "github.com/coordrun/coordrun/ensemble/zk"

// digestID is ZooKeeper's digest identity for "user:password", for tests
// that grant ACLs to digest users.
func digestID(userPass string) string { return zk.DigestID(userPass) }
