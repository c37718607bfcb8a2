package ensemble

// Sessions belong to the connections that hold them. A client connection
// closes and touches only its own session: closeSession proposes the
// close of c.session and every packet notes c.session live (conn.go), and
// a session is held only after its password was shown (handshake.go). A
// member relays to the leader only the liveness of sessions it holds a
// connection for, so a session whose client has left this member is not
// kept alive from here by a batch that was still pending.

// holding returns the ids, in order, of the sessions that have a
// connection in the set.
func (s *clientSet) holding(ids []int64) []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := ids[:0:0]
	for _, id := range ids {
		if s.bySess[id] != nil {
			out = append(out, id)
		}
	}
	return out
}
