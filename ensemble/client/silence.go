package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/coordrun/coordrun/ensemble/wire"
)

// Silence asks the ensemble's leader how long it has not heard from
// session id, and the session's timeout. ok is false when the answer is
// not known: the server is not a coordrun member (Apache ZooKeeper has no
// such read), its leader could not be asked, or it holds no such session.
func (c *Client) Silence(ctx context.Context, id int64) (silent, timeout time.Duration, ok bool, err error) {
	data, _, err := c.Get(ctx, wire.SilencePath(id))
	switch {
	case errors.Is(err, wire.ErrNoNode), errors.Is(err, wire.ErrNoAuth):
		return 0, 0, false, nil
	case err != nil:
		return 0, 0, false, err
	}
	var s wire.Silence
	if err := json.Unmarshal(data, &s); err != nil {
		return 0, 0, false, fmt.Errorf("session 0x%x silence: %w", id, err)
	}
	if !s.Tracked {
		return 0, 0, false, nil
	}
	return time.Duration(s.SilentMS) * time.Millisecond, time.Duration(s.TimeoutMS) * time.Millisecond, true, nil
}
