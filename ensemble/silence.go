package ensemble

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	"github.com/coordrun/coordrun/ensemble/tree"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/ensemble/zk"
)

// A session's silence, read by clients through wire.SilencePath: how long
// the leader has not heard from it. The leader alone tracks liveness, so a
// follower asks it; this is what lets `coordrun status` call a frozen or
// dead holder lingering as the leader's status page does.

// silence is the leader's view of session id, asked of the leader when
// this member does not lead; a session asker may not see (by this
// member's tree) is answered as one nobody tracks.
func (m *Member) silence(ctx context.Context, asker zk.Session, id int64) (wire.Silence, error) {
	var visible bool
	m.fsm.view(func(t *tree.Tree, _ int64) { visible = zk.MaySeeSilence(t, asker, id) })
	if !visible {
		return wire.Silence{}, nil
	}
	return leaderCall(m, rpcSilence,
		func() ([]byte, error) { return binary.BigEndian.AppendUint64(nil, uint64(id)), nil },
		func() pending[wire.Silence] { return answered(m.localSilence(id), nil) },
		func(b []byte, _ time.Time) (wire.Silence, error) {
			var s wire.Silence
			if err := json.Unmarshal(b, &s); err != nil {
				return wire.Silence{}, fmt.Errorf("silence reply: %w", err)
			}
			return s, nil
		})(ctx)
}

func (m *Member) localSilence(id int64) wire.Silence {
	silent, timeout, ok := m.track.silence(id)
	if !ok {
		return wire.Silence{}
	}
	return wire.Silence{Tracked: true, SilentMS: silent.Milliseconds(), TimeoutMS: timeout.Milliseconds()}
}

func (m *Member) serveSilence(payload []byte) pending[[]byte] {
	if len(payload) != 8 {
		return answered[[]byte](nil, fmt.Errorf("%w: a session id of %d bytes", errBadRequest, len(payload)))
	}
	b, err := json.Marshal(m.localSilence(int64(binary.BigEndian.Uint64(payload))))
	return answered(b, err)
}
