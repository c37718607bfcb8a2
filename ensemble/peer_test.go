package ensemble

import (
	"bufio"
	"encoding/binary"
	"net"
	"sync"
	"testing"
)

// Frames sent from many goroutines, in bursts with idle moments between
// them (when the writer wakes to find nothing queued), arrive whole and,
// per sender, in order.
func TestFrameWriterKeepsFrames(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	stop := make(chan struct{})
	defer close(stop)
	fw := newFrameWriter(nil, a, stop, func(err error) { t.Errorf("write: %v", err) })

	const senders, frames = 8, 3000
	var wg sync.WaitGroup
	for s := 0; s < senders; s++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < frames; i++ {
				payload := make([]byte, 8+i%64)
				binary.BigEndian.PutUint32(payload, uint32(s))
				binary.BigEndian.PutUint32(payload[4:], uint32(i))
				for j := 8; j < len(payload); j++ {
					payload[j] = byte(s + i + j)
				}
				if err := fw.send(rpcTouch, uint64(s)<<32|uint64(i), payload); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	r := bufio.NewReader(b)
	next := make([]int, senders)
	for n := 0; n < senders*frames; n++ {
		kind, id, payload, err := readRPC(r, anyFrame)
		if err != nil {
			t.Fatalf("frame %d: %v", n, err)
		}
		s, i := int(id>>32), int(uint32(id))
		if kind != rpcTouch || s >= senders || len(payload) != 8+i%64 ||
			int(binary.BigEndian.Uint32(payload)) != s || int(binary.BigEndian.Uint32(payload[4:])) != i {
			t.Fatalf("frame %d garbled: kind %d id %x len %d", n, kind, id, len(payload))
		}
		for j := 8; j < len(payload); j++ {
			if payload[j] != byte(s+i+j) {
				t.Fatalf("frame %d from %d/%d: byte %d garbled", n, s, i, j)
			}
		}
		if i != next[s] {
			t.Fatalf("sender %d: frame %d arrived, expected %d", s, i, next[s])
		}
		next[s]++
	}
	wg.Wait()
}
