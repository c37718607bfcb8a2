package etcdengine

// freeze stops the session's renewals without revoking its lease, as a
// holder killed with SIGKILL or frozen with SIGSTOP leaves it.
func (c *Conn) freeze() { c.stop() }
