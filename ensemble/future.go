package ensemble

// raftFuture is what raft's futures have in common.
type raftFuture interface{ Error() error }

// await waits for a raft future, or for the member to close. Raft does not
// answer every future once it has shut down (a VerifyLeader or an Apply
// caught in the shutdown can wait forever), so a caller that Close waits
// for must not block on Error alone. The goroutine that reads Error ends
// when raft answers; if raft never does, it is the one goroutine left
// behind, and it holds nothing but the future.
func (m *Member) await(f raftFuture) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-m.ctx.Done():
		return m.ctx.Err()
	}
}
