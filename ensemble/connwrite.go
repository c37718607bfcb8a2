package ensemble

import (
	"bufio"
	"time"

	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/ensemble/zk"
)

// The writer side of a client connection: replies and watch notifications
// are queued by the sequencer and the FSM and written by one goroutine.

// push queues a frame for the writer.
func (c *conn) push(frame []byte) { c.pushFrame(frame, frameOther) }

// What a queued frame is, for the metrics of the batch it goes out in.
const (
	frameOther        = iota
	frameWriteReply   // counts in the write stage
	frameNotification // counts in coordrun_notification_seconds
)

// pushFrame queues a frame of the kind given.
func (c *conn) pushFrame(frame []byte, kind int) {
	c.outMu.Lock()
	now := time.Now()
	if len(c.out) == 0 {
		c.outSince = now
	}
	switch {
	case kind == frameWriteReply:
		c.outWrite = true
	case kind == frameNotification && c.outNote.IsZero():
		c.outNote = now
	}
	c.out = append(c.out, frame)
	c.outBytes += len(frame)
	over := c.outBytes > maxQueuedReplyBytes
	c.outMu.Unlock()
	if over {
		c.env.log.Warn("client not reading replies; closing", "remote", c.remote)
		c.close()
		return
	}
	kick(c.outKick)
}

func (c *conn) writeLoop() {
	stats := c.env.stats
	for {
		select {
		case <-c.done:
			return
		case <-c.outKick:
		}
		c.outMu.Lock()
		frames, since, write, note := c.out, c.outSince, c.outWrite, c.outNote
		c.out, c.outWrite, c.outNote = nil, false, time.Time{}
		c.outBytes = 0
		closing := c.closing
		c.outMu.Unlock()
		if err := c.writeFrames(frames); err != nil {
			c.close()
			return
		}
		if write {
			stats.stage(stageWrite, time.Since(since))
		}
		if !note.IsZero() {
			stats.notified.Observe(time.Since(note).Seconds())
		}
		if closing {
			c.close()
			return
		}
	}
}

// writeFrames writes frames in as few system calls as they fit in, through
// a pooled buffer.
func (c *conn) writeFrames(frames [][]byte) error {
	if len(frames) == 0 {
		return nil
	}
	w := writers.Get().(*bufio.Writer)
	w.Reset(c.nc)
	defer func() { w.Reset(nil); writers.Put(w) }()
	stats := c.env.stats
	for _, f := range frames {
		if _, err := w.Write(f); err != nil {
			return err
		}
		stats.sent.Add(1)
		stats.bytesOut.Add(int64(len(f)))
	}
	return w.Flush()
}

func (c *conn) notify(ev wire.WatcherEvent, zxid int64) {
	c.notifyFrame(zk.NotificationFrame(ev, zxid))
}

// notifyFrame queues an encoded notification. The frame may be shared
// with other connections: queued frames are only ever read.
func (c *conn) sessionID() int64 { return c.session }

func (c *conn) notifyFrame(frame []byte) {
	c.env.stats.notifications.Add(1)
	c.pushFrame(frame, frameNotification)
}
