package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// DefaultMaxData is ZooKeeper's default jute.maxbuffer: the largest node
// payload, and the basis for the largest frame a server accepts.
const DefaultMaxData = 1 << 20

// ErrFrameTooLarge reports a frame whose declared length is negative or
// above the caller's limit. The body is not read, so the stream is no longer
// in sync and the connection has to be closed.
var ErrFrameTooLarge = errors.New("wire: frame length out of range")

// ReadFrame reads one length-prefixed frame from r and returns its body.
// The body is read into buf when its capacity suffices, so a connection can
// reuse one buffer for every request.
//
// A length below zero or above max yields an error wrapping
// ErrFrameTooLarge without reading further. End of stream before the first
// byte yields io.EOF (a clean close); inside a frame, io.ErrUnexpectedEOF.
func ReadFrame(r io.Reader, buf []byte, max int) ([]byte, error) {
	var hdr []byte
	if cap(buf) >= 4 {
		hdr = buf[:4]
	} else {
		hdr = make([]byte, 4)
	}
	if _, err := io.ReadFull(r, hdr); err != nil {
		return nil, err
	}
	n := int32(binary.BigEndian.Uint32(hdr))
	if n < 0 || int64(n) > int64(max) {
		return nil, fmt.Errorf("%w: %d bytes (max %d)", ErrFrameTooLarge, n, max)
	}
	if cap(buf) >= int(n) {
		buf = buf[:n]
	} else {
		buf = make([]byte, n)
	}
	if _, err := io.ReadFull(r, buf); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return buf, nil
}

// AppendFrame appends body to dst behind its 4-byte length prefix. Replies
// built with a frame encoder do not need it; it suits bodies that were
// encoded elsewhere.
func AppendFrame(dst, body []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(body)))
	return append(dst, body...)
}

// IsFourLetterWord reports whether the first four bytes of a connection are
// one of ZooKeeper's four-letter admin commands rather than a frame length.
// Every such word read as a big-endian length is far above any sane frame
// limit, so the two cannot be confused.
func IsFourLetterWord(first4 [4]byte) (string, bool) {
	switch string(first4[:]) {
	case "ruok":
		return "ruok", true
	case "srvr":
		return "srvr", true
	case "stat":
		return "stat", true
	case "mntr":
		return "mntr", true
	case "conf":
		return "conf", true
	case "cons":
		return "cons", true
	case "envi":
		return "envi", true
	case "isro":
		return "isro", true
	case "wchs":
		return "wchs", true
	case "wchp":
		return "wchp", true
	case "wchc":
		return "wchc", true
	case "dump":
		return "dump", true
	case "dirs":
		return "dirs", true
	case "crst":
		return "crst", true
	case "srst":
		return "srst", true
	}
	return "", false
}

// A reply frame starts with its length prefix and the ReplyHeader: xid at
// byte 4, zxid at byte 8, error code at byte 16.
const replyZxidAt, replyHeaderEnd = 8, 20

// ReplyZxid returns the zxid in the header of a complete reply frame
// (length prefix included), and false for a frame too short to hold one.
func ReplyZxid(frame []byte) (int64, bool) {
	if len(frame) < replyHeaderEnd {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(frame[replyZxidAt:])), true
}

// PatchReplyZxid overwrites the zxid in the header of a complete reply
// frame, so that a server can raise it after the reply was encoded. A frame
// too short to hold a header is left alone.
func PatchReplyZxid(frame []byte, zxid int64) {
	if len(frame) >= replyHeaderEnd {
		binary.BigEndian.PutUint64(frame[replyZxidAt:], uint64(zxid))
	}
}
