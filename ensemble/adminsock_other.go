//go:build !linux

package ensemble

import "errors"

// socketPeerUID: the admin socket needs SO_PEERCRED, which this system
// lacks; every connection is refused.
func socketPeerUID(uintptr) (int, error) {
	return 0, errors.New("the admin socket needs Linux (SO_PEERCRED)")
}
