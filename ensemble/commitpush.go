package ensemble

import (
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// A follower learns that an entry is committed from the leader's next
// AppendEntries. hashicorp/raft sends one when new entries are appended or,
// on a quiet ensemble, after CommitTimeout (5–10 ms here). Until then the
// follower has the entry on disk but does not apply it: its watches do not
// fire and its clients cannot read the write. A lock handoff between clients
// of followers (the release's notification, then the next holder's check)
// would wait for that timer on every handoff.
//
// commitPusher closes the gap. When the leader has applied entries and no
// newer ones are in flight, it sends each follower already storing them an
// AppendEntries with no entries, PrevLogEntry = the last applied index,
// PrevLogTerm = that entry's term and LeaderCommitIndex = that index: the
// very message raft sends after CommitTimeout, only sooner. It is safe for
// the reason raft's is: the follower accepts it only if its entry at that
// index has that term, which by log matching makes its log equal to the
// leader's up to there, and that prefix is committed. The request carries
// the entry's own term, in which this member led (it proposed the entry);
// a follower already in a later term ignores it.
//
// To push only to followers that store the entry (a push to one that does
// not is refused and logged by raft), pushTransport watches raft's own
// successful AppendEntries and keeps, per follower, how far its log is known
// to match the leader's in the current term.
type commitPusher struct {
	raft  atomic.Pointer[raft.Raft] // set once raft runs
	inner *raft.NetworkTransport
	tr    *tracker
	stop  chan struct{}

	mu     sync.Mutex     // guards index, term, header, leader, hterm and peers
	index  uint64         // last command applied as leader
	term   uint64         // its term
	header raft.RPCHeader // as raft sends it, from the newest term seen
	leader []byte         // the deprecated Leader field, likewise
	hterm  uint64
	peers  map[raft.ServerID]*pushPeer
}

type pushPeer struct {
	id     raft.ServerID
	addr   raft.ServerAddress
	term   uint64 // term in which match was learned
	match  uint64 // the follower's log equals ours up to here
	pushed uint64 // last commit index pushed
	kick   chan struct{}
}

// newCommitPusher pushes through inner; its goroutines are started
// through tr.
func newCommitPusher(tr *tracker, inner *raft.NetworkTransport) *commitPusher {
	return &commitPusher{inner: inner, tr: tr, stop: make(chan struct{}), peers: map[raft.ServerID]*pushPeer{}}
}

// close stops the pushers; one blocked in a send ends with the transport.
func (c *commitPusher) close() {
	c.mu.Lock()
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	c.mu.Unlock()
}

// applied is called after the FSM applied commands up to index, logged in
// term. Only the leader pushes.
func (c *commitPusher) applied(index, term uint64) {
	r := c.raft.Load()
	if r == nil || r.State() != raft.Leader {
		return
	}
	c.mu.Lock()
	if index > c.index {
		c.index, c.term = index, term
	}
	for _, p := range c.peers {
		kick(p.kick)
	}
	c.mu.Unlock()
}

// observe records a successful AppendEntries to a follower.
func (c *commitPusher) observe(id raft.ServerID, addr raft.ServerAddress, req *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) {
	if !resp.Success || resp.Term != req.Term {
		return
	}
	upto := req.PrevLogEntry
	if n := len(req.Entries); n > 0 {
		upto = req.Entries[n-1].Index
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.peers[id]
	if p == nil {
		select {
		case <-c.stop:
			return
		default:
		}
		p = &pushPeer{id: id, kick: make(chan struct{}, 1)}
		c.peers[id] = p
		c.tr.Go(func() { c.run(p) })
	}
	p.addr = addr
	if req.Term > c.hterm {
		c.hterm, c.header, c.leader = req.Term, req.RPCHeader, req.Leader
	}
	if req.Term > p.term {
		p.term, p.match, p.pushed = req.Term, 0, 0
	}
	if req.Term == p.term && upto > p.match {
		p.match = upto
		if c.index > p.pushed && c.index <= upto {
			kick(p.kick)
		}
	}
}

func (c *commitPusher) run(p *pushPeer) {
	for {
		select {
		case <-c.stop:
			return
		case <-p.kick:
		}
		r := c.raft.Load()
		c.mu.Lock()
		index, term := c.index, c.term
		ok := index > p.pushed && p.term == term && p.match >= index
		req := raft.AppendEntriesRequest{
			RPCHeader:         c.header,
			Term:              term,
			Leader:            c.leader,
			PrevLogEntry:      index,
			PrevLogTerm:       term,
			LeaderCommitIndex: index,
		}
		addr := p.addr
		c.mu.Unlock()
		// Entries beyond index are in flight: raft's AppendEntries for
		// them, or the push after they commit, tells the follower.
		if !ok || r == nil || r.State() != raft.Leader || r.LastIndex() > index {
			continue
		}
		var resp raft.AppendEntriesResponse
		if err := c.inner.AppendEntries(p.id, addr, &req, &resp); err != nil {
			continue
		}
		c.mu.Lock()
		switch {
		case p.term != term:
		case resp.Success && index > p.pushed:
			p.pushed = index
		case !resp.Success:
			// Its log no longer holds what it did (a member rebuilt
			// under the same id): learn its progress afresh from raft.
			p.match = 0
		}
		c.mu.Unlock()
	}
}

// pushTransport is raft's transport with the follower progress that
// commitPusher needs taken from its AppendEntries replies.
type pushTransport struct {
	*raft.NetworkTransport
	push *commitPusher
}

func (t *pushTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, req *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	err := t.NetworkTransport.AppendEntries(id, target, req, resp)
	if err == nil {
		t.push.observe(id, target, req, resp)
	}
	return err
}

func (t *pushTransport) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	inner, err := t.NetworkTransport.AppendEntriesPipeline(id, target)
	if err != nil {
		return nil, err
	}
	p := &pushPipeline{AppendPipeline: inner, out: make(chan raft.AppendFuture), done: make(chan struct{})}
	t.push.tr.Go(func() {
		p.forward(func(f raft.AppendFuture) { t.push.observe(id, target, f.Request(), f.Response()) })
	})
	return p, nil
}

// pushPipeline hands raft the pipeline's replies after noting them.
type pushPipeline struct {
	raft.AppendPipeline
	out  chan raft.AppendFuture
	done chan struct{}
	once sync.Once
}

func (p *pushPipeline) forward(note func(raft.AppendFuture)) {
	in := p.AppendPipeline.Consumer()
	for {
		select {
		case f := <-in:
			if f.Error() == nil {
				note(f)
			}
			select {
			case p.out <- f:
			case <-p.done:
				return
			}
		case <-p.done:
			return
		}
	}
}

func (p *pushPipeline) Consumer() <-chan raft.AppendFuture { return p.out }

func (p *pushPipeline) Close() error {
	p.once.Do(func() { close(p.done) })
	return p.AppendPipeline.Close()
}
