package jailinit

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// markPassed marks the descriptors the parent passed on purpose
// close-on-exec before anything else runs: the payload gets them only
// where startPayload places them, and a step that closes what init
// inherited without the flag keeps them.
func markPassed(fds []int) error {
	for _, fd := range fds {
		if fd < FirstPassFD {
			return fmt.Errorf("descriptor %d to pass: not one the parent passed (from %d up)", fd, FirstPassFD)
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
			return fmt.Errorf("descriptor %d to pass: %w", fd, err)
		}
	}
	return nil
}
