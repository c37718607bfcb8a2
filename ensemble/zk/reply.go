package zk

import "github.com/coordrun/coordrun/ensemble/wire"

// MaxReply bounds a reply frame. A read's reply is not bounded by its
// request: a multiRead of 16 KB naming a node with many children a
// thousand times asks for hundreds of MB. A reply that would pass this is
// answered with ErrMarshallingError instead, after at most MaxReply bytes
// were encoded. ZooKeeper sends such replies whole, and its clients fail
// to read one above their jute.maxbuffer (1 MiB by default) and lose
// the connection; an error code tells them more, and is final where a
// lost connection invites a retry. 16 MiB is the coordrun client's own
// read limit, so every reply it could read is still sent, child lists of
// hundreds of thousands of nodes included. A write's reply (multi
// included) is at most a few times the size of its request, itself under
// the frame limit, so writes, whose replies must not say they failed when
// they did not, never meet the bound.
const MaxReply = 16 << 20

// ErrReplyTooLarge is the code of a reply that would pass MaxReply.
const ErrReplyTooLarge = wire.ErrMarshallingError

// reply builds a reply frame: the header, then the body fill writes. When
// fill returns an error code the frame is the header alone, carrying it:
// ZooKeeper sends no body with an error.
func reply(xid int32, zxid int64, fill func(e *wire.Encoder) wire.Code) []byte {
	frame, _ := boundedReply(xid, zxid, fill)
	return frame
}

// boundedReply is reply, with tooLarge set when the body passed MaxReply
// and the frame says ErrReplyTooLarge instead.
func boundedReply(xid int32, zxid int64, fill func(e *wire.Encoder) wire.Code) (frame []byte, tooLarge bool) {
	e := wire.NewFrameEncoder(make([]byte, 0, 128))
	e.Limit(MaxReply)
	(&wire.ReplyHeader{Xid: xid, Zxid: zxid}).Encode(e)
	code := fill(e)
	if e.Over() {
		// A fresh frame: the encoder's storage is MaxReply large.
		return header(xid, zxid, ErrReplyTooLarge), true
	}
	if code != wire.OK {
		e.Reset()
		(&wire.ReplyHeader{Xid: xid, Zxid: zxid, Err: code}).Encode(e)
	}
	return e.Frame(), false
}

// header is a reply without a body: code OK for the requests whose success
// says nothing more (ping, auth, closeSession, setWatches, removeWatches).
func header(xid int32, zxid int64, code wire.Code) []byte {
	e := wire.NewFrameEncoder(make([]byte, 0, 20))
	(&wire.ReplyHeader{Xid: xid, Zxid: zxid, Err: code}).Encode(e)
	return e.Frame()
}

// OKReply is a reply without a body: ping, auth, closeSession.
func OKReply(xid int32, zxid int64) []byte { return header(xid, zxid, wire.OK) }

// ErrorReply is the reply that fails a request with code.
func ErrorReply(xid int32, zxid int64, code wire.Code) []byte { return header(xid, zxid, code) }

// SyncReply answers a sync of path once the member has caught up.
func SyncReply(xid int32, zxid int64, path string) []byte {
	return reply(xid, zxid, func(e *wire.Encoder) wire.Code {
		// ZooKeeper echoes the path as Java re-encodes it.
		(&wire.SyncResponse{Path: wire.JavaString(path)}).Encode(e)
		return wire.OK
	})
}

// ReconfigReply answers a reconfig with the new configuration, as ZooKeeper
// does: the data of /zookeeper/config and its stat.
func ReconfigReply(xid int32, zxid int64, config []byte, st wire.Stat) []byte {
	return reply(xid, zxid, func(e *wire.Encoder) wire.Code {
		(&wire.GetDataResponse{Data: config, Stat: st}).Encode(e)
		return wire.OK
	})
}

// NotificationFrame encodes a watch notification. One frame may go to
// every connection the event concerns.
func NotificationFrame(ev wire.WatcherEvent, zxid int64) []byte {
	// Length, reply header (xid, zxid, err), type, state, path.
	e := wire.NewFrameEncoder(make([]byte, 0, 4+16+12+len(ev.Path)))
	(&wire.ReplyHeader{Xid: wire.XidNotification, Zxid: zxid}).Encode(e)
	ev.Encode(e)
	return e.Frame()
}
