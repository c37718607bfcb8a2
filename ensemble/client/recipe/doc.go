// Package recipe holds coordination recipes built on the client: a lock
// queue whose holder is guarded against interference ([Enter]),
// claim-once, the create that exactly one of many contenders wins
// ([ClaimOnce]), leader election ([Election]) and group membership
// ([Group]). They work against a coordrun ensemble and against Apache
// ZooKeeper 3.5+, in the style of etcd's client/v3/concurrency.
//
// The lock queue and the election share their shape (ephemeral sequential
// nodes, each waiter watching only its predecessor, ids chosen before the
// create so that a lost reply leaves no ghost); the lock adds what a job
// that must not run twice needs: the run node, the record of the last
// holder and the rules of interference below.
//
// # The lock queue
//
// A lock is a folder. Every contender creates an ephemeral sequential node
// in it, "lock-<id>-<seq>" ([Enter]); the lowest sequence number is next to
// hold the lock. Each waiter watches only its immediate predecessor, so a
// release wakes exactly one waiter (no herd), and it re-checks the queue
// after every wake-up: the predecessor may have left without the lock ever
// having been free. The random id, chosen before the create, lets a
// contender whose create reply was lost find its own node instead of
// creating a second one (a ghost that would hold the lock forever for a
// session that thinks it is still waiting).
//
// The run node. The queue gives the order, but any client with rights on
// the folder can delete a queue node, and then the next in line would
// start while the holder's work still runs. So the lowest contender does
// not hold on its queue position alone: it must also create the folder's
// one ephemeral "run" node, in a multi that checks its own queue node
// still exists and records it as holder ([Entry.Acquire]). The holder
// deletes the run node (with its queue node, in one multi) only once its
// work is over ([Entry.Release]); until then the next in line finds the
// run node taken and watches it. A run node whose owner's session ends
// vanishes with it, so a crashed holder is replaced one session timeout
// after its crash.
//
// The record. The folder's data names the last holder: "held <node>"
// while a holder runs, "stopping <node>" once it heard of interference
// with its nodes, "released <node>" once it let go (in the multi that
// deletes its nodes, when they are intact). A new holder that finds
// "held" or "stopping" naming another node knows the previous holder did
// not release, its session ended instead ([Entry.UncleanHandoff]); a
// caller may then wait a lock delay. The take writes the record only over
// the version it decided on.
//
// Interference. The holder can watch its own queue node and run node
// while it holds ([Entry.WatchStanding]); a change or deletion by someone
// else is reported so that the holder stops its work, keeping the run node
// taken meanwhile ([Entry.Retake]). The next in line cannot always tell a
// deletion by someone else from the holder's crash: both make the
// holder's nodes vanish. When it sees evidence of interference (its own
// node gone while its session lives, the run node held by a contender that
// is no longer queued, the holder queued without its run node, the record
// of a holder stopping), it does not trust the vanishing run node: unless the old holder confirms its end
// ("released <node>"), it waits until the old holder's work must be over
// whatever happened to it, the old holder's session timeout plus its kill
// grace after the evidence, as its node's [Info] states them
// ([Entry.MustWait]). A holder that hears of interference records that it
// is stopping before its work hears of it (putting the folder back if it
// was deleted whole), so a second delete that follows the holder's
// reaction is seen even when both nodes are gone by the time the next in
// line looks, and a contender that comes only after a deleteall waits as
// well. A client that deletes exactly the holder's two
// nodes at once (or faster than the holder hears of it) is
// indistinguishable from the holder's crash; against that, only ACLs help
// ([Options.ACL]).
//
// [List] reads a lock's queue, holder and record for status displays.
//
// # Claim once
//
// [ClaimOnce] creates a persistent node that many contenders race for; the
// ensemble lets exactly one create succeed. A create whose reply was lost
// is resolved by reading the node back and recognizing the claimant's own
// data (a nonce in it), so a lost reply neither loses a won claim nor wins
// a lost one.
//
// # A create whose reply was lost
//
// Every node a recipe takes part with (a queue node, a candidate, a live
// node, a claim) is made by one guarded create with one failure contract:
// an unknown outcome is resolved by a sync and a read that recognizes the
// call's own node (by a nonce in a sequential node's name, by the owning
// session, or by a claim's data); a refusal is an [AccessError]; a call
// whose context ends deletes an ephemeral node its create may have made
// before it returns, and keeps a claim, which may have been won.
//
// # Concurrency and ownership
//
// An [Entry] belongs to the goroutine that entered it: its methods are not
// safe for concurrent use, except that the loss channel of WatchStanding
// and Retake may be used from another goroutine while the owner waits.
// The Entry does not own the client: closing the client (or the session
// ending) deletes the entry's ephemeral nodes, which releases the lock
// without the record of a clean release. Every blocking call takes a
// context; operations whose outcome a connection loss left unknown are
// resolved or retried through the client's reconnects, never assumed.
package recipe
