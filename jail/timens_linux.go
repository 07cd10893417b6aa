package jail

import (
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/stockade/stockade/internal/runlock"
	"github.com/stockade/stockade/jail/internal/jailinit"
)

// Init gives the payload a time namespace (so /proc/uptime is the jail's,
// not the host's), but first asks whether this kernel can still start a
// process while one is pending (jailinit.TimeNamespaceUsable: a thread, a
// vfork and a failed exec, 0.5-1 ms of every run). The answer is the
// kernel's: it cannot change while the machine is up (though a process
// refused the namespace by a filter of its own, or by a used-up
// user.max_time_namespaces, cannot make one: init then goes on without,
// as its probe would have decided). So the first run of
// a boot that finds it yes leaves a note, and later runs of the same boot
// and kernel tell init, which then skips its probe.
//
// Only a yes lets init skip its probe. A wrong yes fails closed (the
// payload cannot be started, and the run says so); a wrong no would
// quietly give the payload the host's uptime, so a no is never taken from
// a file: its note only spares this process its own probe. The note
// is trusted only as the run locks are: in the directory that holds the
// lock directory, both levels owned by this user and writable by nobody
// else (runlock.EnsureOwnedDir), a regular file of this user's, writable
// by nobody else, named after this boot's id and the kernel's release.

// timeNSNoteName is the note's name for this boot and kernel, or "" when
// either cannot be read (then there is no note, and init probes).
func timeNSNoteName() string {
	id, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return ""
	}
	rel := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_' || r == '+' {
			return r
		}
		return '_'
	}, unix.ByteSliceToString(u.Release[:]))
	boot := strings.TrimSpace(string(id))
	if boot == "" || strings.ContainsAny(boot, "/\x00") {
		return ""
	}
	return "timens-usable-" + boot + "-" + rel
}

// timeNSNoteDir is where the note lives: beside the run locks.
func timeNSNoteDir() string { return filepath.Dir(runlock.DefaultDir()) }

// timeNSKnownUsable reports whether this boot's note says the kernel can
// start a process with a time namespace pending. Without a note it asks the
// kernel itself (from this process: the answer does not depend on which
// process asks) and, on a yes, leaves the note for the next run. A no, or
// a probe that cannot run here, leaves init to probe as before.
func timeNSKnownUsable() bool {
	return timeNSKnownUsableIn(timeNSNoteDir(), timeNSNoteName(), jailinit.TimeNamespaceUsable)
}

func timeNSKnownUsableIn(dir, name string, probe func() bool) bool {
	if name == "" {
		return false
	}
	path := filepath.Join(dir, name)
	if trustedNote(path) {
		return true
	}
	// A no is noted too, but only so that this process does not probe
	// again on every run of the boot (a kernel that refuses, or a parent
	// without the privilege to ask): it answers "probe", never "no", so
	// init still asks the kernel itself, as it always did.
	probed := filepath.Join(dir, "timens-probed-"+strings.TrimPrefix(name, "timens-usable-"))
	if trustedNote(probed) {
		return false
	}
	// The directory's own trust (both levels ours, writable by nobody
	// else), made if missing as the run locks would make it.
	if runlock.EnsureOwnedDir(dir, 0o700, 0) != nil {
		return false
	}
	yes := probe()
	note := probed
	if yes {
		note = path
	}
	fd, err := unix.Open(note, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err == nil {
		unix.Close(fd)
		// Where /run is not a tmpfs, an earlier boot's note is still
		// there: one note at a time is left behind, never one per boot.
		old, _ := filepath.Glob(filepath.Join(dir, "timens-*"))
		for _, o := range old {
			if o != note {
				os.Remove(o)
			}
		}
	}
	return yes
}

// trustedNote: path is a regular file (not a link) of this user's,
// writable by nobody else, in a directory that is too.
func trustedNote(path string) bool {
	var st unix.Stat_t
	if unix.Lstat(path, &st) != nil || !runlock.OwnedOnly(&st, unix.S_IFREG) {
		return false
	}
	dir := filepath.Dir(path)
	for _, d := range []string{filepath.Dir(dir), dir} {
		if unix.Lstat(d, &st) != nil || !runlock.OwnedOnly(&st, unix.S_IFDIR) {
			return false
		}
	}
	return true
}
