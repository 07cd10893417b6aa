package fds

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Dup returns a duplicate of fd that is close-on-exec. dup(2) gives a
// descriptor without the flag: a child that another goroutine forks while
// the duplicate is open inherits it (copy-back's directory duplicate, open
// during a concurrent jail's clone, reached that jail's payload).
func Dup(fd int) (int, error) {
	return unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
}

// List returns the descriptors this process has open, read from
// /proc/self/fd, in ascending order; the descriptor List reads through is
// not among them.
func List() ([]int, error) {
	dir, err := unix.Open("/proc/self/fd", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open /proc/self/fd: %w", err)
	}
	defer unix.Close(dir)
	var fds []int
	buf := make([]byte, 4096)
	for {
		n, err := unix.ReadDirent(dir, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read /proc/self/fd: %w", err)
		}
		if n == 0 {
			break
		}
		var names []string
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
		for _, name := range names {
			fd, err := strconv.Atoi(name)
			if err != nil {
				return nil, fmt.Errorf("/proc/self/fd: unexpected entry %q", name)
			}
			if fd != dir {
				fds = append(fds, fd)
			}
		}
	}
	// The kernel lists them in order, but nothing promises it.
	slices.Sort(fds)
	return fds, nil
}

// Describe names what fd refers to, as /proc/self/fd shows it, for error
// messages.
func Describe(fd int) string {
	target, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return strconv.Itoa(fd)
	}
	return strconv.Itoa(fd) + " (" + target + ")"
}

// closeOnExec reports whether fd has FD_CLOEXEC set.
func closeOnExec(fd int) (bool, error) {
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	if err != nil {
		return false, err
	}
	return flags&unix.FD_CLOEXEC != 0, nil
}

// CloseOnExecFrom marks every descriptor from lowest up close-on-exec, then
// reads the table back and fails if one is not. Nothing is closed: this
// process may still use what it inherited (systemd's LISTEN_FDS sockets),
// but no process it starts receives any of them unless it passes them on
// purpose (exec.Cmd's ExtraFiles clear the flag on the copy they make).
//
// close_range(CLOSE_RANGE_CLOEXEC) marks them all in one call (Linux 5.11).
// Without it (ENOSYS before 5.9, EINVAL for the flag on 5.9 and 5.10, EPERM
// from a container's seccomp profile that predates the call) each
// descriptor /proc/self/fd lists is marked with fcntl; the read-back
// judges either way.
func CloseOnExecFrom(lowest int) error {
	err := unix.CloseRange(uint(lowest), ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EPERM) {
		err = markEach(lowest)
	}
	if err != nil {
		return fmt.Errorf("mark descriptors from %d close-on-exec: %w", lowest, err)
	}
	return VerifyCloseOnExec(lowest)
}

func markEach(lowest int) error {
	open, err := List()
	if err != nil {
		return err
	}
	for _, fd := range open {
		if fd < lowest {
			continue
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil && !errors.Is(err, unix.EBADF) {
			return fmt.Errorf("descriptor %s: %w", Describe(fd), err)
		}
	}
	return nil
}

// VerifyCloseOnExec reads /proc/self/fd and returns an error naming every
// descriptor from lowest up that a process started now would inherit.
func VerifyCloseOnExec(lowest int) error {
	open, err := List()
	if err != nil {
		return err
	}
	var kept []string
	for _, fd := range open {
		if fd < lowest {
			continue
		}
		cloexec, err := closeOnExec(fd)
		if errors.Is(err, unix.EBADF) {
			continue // closed since the listing: nothing to inherit
		}
		if err != nil {
			return fmt.Errorf("read the flags of descriptor %s: %w", Describe(fd), err)
		}
		if !cloexec {
			kept = append(kept, Describe(fd))
		}
	}
	if len(kept) > 0 {
		return fmt.Errorf("descriptors a child would inherit: %s", strings.Join(kept, ", "))
	}
	return nil
}

// CloseInherited closes every descriptor from lowest up that this process
// inherited across its execve, and verifies that none is left. Inherited
// means without close-on-exec: execve closed every descriptor that had the
// flag, and everything opened since (by Go's runtime, os, net, and this
// repository, which the static check keeps so) has it.
//
// It does not close the whole range, as close_range(lowest, ~0U, 0) would:
// Go's runtime (1.25 and later) opens its cgroup CPU limit files before
// main and keeps them open, at the first numbers free, to re-read the
// limit. Closing them would let the next open reuse their numbers and the
// runtime read, or close, someone else's descriptor. Each run of adjacent
// inherited descriptors is closed with one close_range; close(2) one by
// one only where close_range does not exist (ENOSYS, before Linux 5.9, or
// EPERM from a seccomp profile that predates it).
func CloseInherited(lowest int) error {
	open, err := List()
	if err != nil {
		return err
	}
	var inherited []int
	for _, fd := range open {
		if fd < lowest {
			continue
		}
		cloexec, err := closeOnExec(fd)
		if err != nil {
			return fmt.Errorf("read the flags of descriptor %s: %w", Describe(fd), err)
		}
		if !cloexec {
			inherited = append(inherited, fd)
		}
	}
	for i := 0; i < len(inherited); {
		j := i
		for j+1 < len(inherited) && inherited[j+1] == inherited[j]+1 {
			j++
		}
		if err := closeRun(inherited[i], inherited[j]); err != nil {
			return err
		}
		i = j + 1
	}
	return VerifyCloseOnExec(lowest)
}

// closeRun closes the descriptors first..last.
func closeRun(first, last int) error {
	err := unix.CloseRange(uint(first), uint(last), 0)
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
		for fd := first; fd <= last; fd++ {
			if err := unix.Close(fd); err != nil && !errors.Is(err, unix.EBADF) {
				return fmt.Errorf("close inherited descriptor %d: %w", fd, err)
			}
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("close inherited descriptors %d-%d: %w", first, last, err)
	}
	return nil
}
