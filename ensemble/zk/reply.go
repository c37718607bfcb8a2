package zk

import "github.com/coordrun/coordrun/ensemble/wire"

// reply builds a reply frame: the header, then the body fill writes. When
// fill returns an error code the frame is the header alone, carrying it:
// ZooKeeper sends no body with an error.
func reply(xid int32, zxid int64, fill func(e *wire.Encoder) wire.Code) []byte {
	e := wire.NewFrameEncoder(make([]byte, 0, 128))
	(&wire.ReplyHeader{Xid: xid, Zxid: zxid}).Encode(e)
	if code := fill(e); code != wire.OK {
		e.Reset()
		(&wire.ReplyHeader{Xid: xid, Zxid: zxid, Err: code}).Encode(e)
	}
	return e.Frame()
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
