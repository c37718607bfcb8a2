package ensemble

import "syscall"

// socketPeerUID reads the peer's credentials the kernel recorded at
// connect (SO_PEERCRED): they cannot be forged by the peer.
func socketPeerUID(fd uintptr) (int, error) {
	cred, err := syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	if err != nil {
		return 0, err
	}
	return int(cred.Uid), nil
}
