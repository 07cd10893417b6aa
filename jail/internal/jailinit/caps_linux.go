package jailinit

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// InitCaps are the capabilities init keeps (as ambient capabilities across
// its own execve) to build the jail: mounts and pivot_root and sethostname
// (SYS_ADMIN), bringing lo up (NET_ADMIN), emptying the bounding set
// (SETPCAP), becoming the jail user (SETUID, SETGID), lowering the
// namespace's per-user object limits (SYS_RESOURCE), setting the time
// namespace's boottime offset (SYS_TIME, which in a user namespace sets no
// clock), and the overlay over a --workdir (DAC_OVERRIDE: overlay makes its
// work directory mode 0 and then writes its marks there as the mounter).
// They are all capabilities in the jail's own user namespace, never on the
// host: DAC_OVERRIDE there reaches only files of the one host id the
// namespace maps, the jail user's own.
var InitCaps = []uintptr{unix.CAP_SYS_ADMIN, unix.CAP_NET_ADMIN, unix.CAP_SETPCAP, unix.CAP_SETUID, unix.CAP_SETGID, unix.CAP_SYS_RESOURCE, unix.CAP_SYS_TIME, unix.CAP_DAC_OVERRIDE}

// becomeJailUser turns the calling OS thread (locked by the caller) into
// the jail user with no capabilities at all and no_new_privs. Linux keeps
// credentials per thread, and the payload is forked from this thread, so it
// inherits exactly this and nothing of init's other threads. Each step is
// checked; any failure stops the run.
func becomeJailUser(setGroups bool) error {
	last, err := lastCap()
	if err != nil {
		return err
	}
	// The bounding set first: dropping it needs CAP_SETPCAP, which goes
	// with the rest below. An empty bounding set means no later execve of a
	// file with capabilities can give any back.
	for c := 0; c <= last; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	// Raw syscalls, not syscall.Setresuid: Go's wrappers change every
	// thread of the process, and init's other threads are not the payload.
	if setGroups {
		if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); e != 0 {
			return fmt.Errorf("clear supplementary groups: %w", e)
		}
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, JailGID, JailGID, JailGID); e != 0 {
		return fmt.Errorf("setresgid %d: %w", JailGID, e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, JailUID, JailUID, JailUID); e != 0 {
		return fmt.Errorf("setresuid %d: %w", JailUID, e)
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var none [2]unix.CapUserData
	if err := unix.Capset(&hdr, &none[0]); err != nil {
		return fmt.Errorf("clear capabilities: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("set no_new_privs: %w", err)
	}
	return verifyNoPrivileges(last)
}

// verifyNoPrivileges reads back what becomeJailUser set, so that a kernel
// that silently ignored a step cannot leave the payload privileged.
func verifyNoPrivileges(last int) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var got [2]unix.CapUserData
	if err := unix.Capget(&hdr, &got[0]); err != nil {
		return fmt.Errorf("read capabilities back: %w", err)
	}
	for _, d := range got {
		if d.Effective|d.Permitted|d.Inheritable != 0 {
			return fmt.Errorf("capabilities still set after dropping them: %+v", got)
		}
	}
	for c := 0; c <= last; c++ {
		in, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0)
		if err != nil || in != 0 {
			return fmt.Errorf("capability %d still in the bounding set", c)
		}
	}
	nnp, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)
	if err != nil || nnp != 1 {
		return fmt.Errorf("no_new_privs did not stick (%d, %v)", nnp, err)
	}
	r, e, s := unix.Getresuid()
	if r != JailUID || e != JailUID || s != JailUID {
		return fmt.Errorf("uids are %d/%d/%d, not %d", r, e, s, JailUID)
	}
	return nil
}

func lastCap() (int, error) {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return 0, fmt.Errorf("read cap_last_cap: %w", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("parse cap_last_cap %q: %w", b, err)
	}
	return n, nil
}
