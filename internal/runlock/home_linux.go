package runlock

import (
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/stockade/stockade/internal/hostenv"
	"golang.org/x/sys/unix"
)

// ownUIDMap is this process's uid_map, read once: a user namespace's map
// is written once and never changes, and a process of several threads (any
// Go program) cannot move to another user namespace. Every run asks
// several times, and /proc reads are not free (0.1 ms each on a loaded
// host).
var ownUIDMap = sync.OnceValues(func() (hostenv.IDMap, error) {
	return hostenv.ReadIDMap("/proc/self/uid_map")
})

// HostRoot reports whether stockade is root of the host's /run: effective
// uid 0, and uid 0 of the user namespace above as well (the initial
// namespace, or a container that shares the host's ids). Root of a user
// namespace that maps it to anyone else (`unshare -Ur` of a normal user,
// rootless podman, some CI runners) is not: where it shares the host's
// /run, /run/stockade is host root's, holding host root's live locks, and
// must be neither used nor removed. Such a root keeps its state where the
// user it is on the host keeps theirs (UserDir). A map that cannot be read
// counts as the initial namespace's, where root's /run is root's.
//
// The map says only what uid 0 is one namespace up. Nested in a namespace
// that maps only its root (`unshare -Ur` inside a rootless container or a
// CI job's own namespace) it reads "0 0 1", and that 0 is a normal user on
// the host; so a file the kernel always gives to host root must show as
// ours too: the kernel's sysctl files are host root's in every namespace,
// and show as the overflow uid where host root is not mapped.
func HostRoot() bool {
	if os.Geteuid() != 0 {
		return false
	}
	m, err := ownUIDMap()
	if err != nil {
		return true
	}
	if out, ok := m.Outside(0); !ok || out != 0 {
		return false
	}
	return !hostRootUnmapped()
}

// hostRootUnmapped reports, once (as ownUIDMap), whether a file that is
// host root's whatever namespace looks at it shows as another uid here:
// proc_sys_make_inode gives every sysctl file but the network's
// GLOBAL_ROOT_UID, in every /proc, a container's own included. Unreadable,
// it says nothing.
var hostRootUnmapped = sync.OnceValue(func() bool {
	var st unix.Stat_t
	return unix.Stat("/proc/sys/kernel/overflowuid", &st) == nil && st.Uid != 0
})

// HostUID is the effective uid as the user namespace above knows it (the
// uid itself in the initial namespace): the one owner that a per-user
// directory in a shared place is named after, so that the stockade of a
// user namespace that maps only its root and the same user's stockade
// outside it share one directory, and two users' namespace roots never do.
// An unreadable or unmapped map gives the uid itself.
func HostUID() int {
	uid := os.Geteuid()
	m, err := ownUIDMap()
	if err != nil {
		return uid
	}
	if out, ok := m.Outside(uid); ok {
		return int(out)
	}
	return uid
}

// UserDir is the directory that holds the lock directory, the id numbers
// and the run directories of a stockade that is not HostRoot:
// $XDG_RUNTIME_DIR/stockade (the user's own, emptied at logout), else
// $TMPDIR/stockade-<HostUID>. Its parent is never checked: /tmp is root's
// and writable by all, and safe as the sticky directory it is; the
// directory itself and what is below it must be the user's (see
// EnsureOwnedDir).
func UserDir() string {
	if x := os.Getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(x) {
		return filepath.Join(filepath.Clean(x), "stockade")
	}
	return TempUserDir()
}

// TempUserDir is the temp directory's name for this user's stockade
// directory, $TMPDIR/stockade-<HostUID>: UserDir without
// $XDG_RUNTIME_DIR, and the name the private fallback bases start with.
func TempUserDir() string {
	return filepath.Join(os.TempDir(), "stockade-"+strconv.Itoa(HostUID()))
}
