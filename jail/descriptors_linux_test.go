package jail

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// heldDescriptors is a payload that reports every descriptor it holds
// beyond 0-2, writes a line into each and lists each that is a directory:
// "HELD" when there is none.
const heldDescriptors = `import os
held = []
for n in sorted(os.listdir("/proc/self/fd"), key=int):
    fd = int(n)
    if fd <= 2:
        continue
    try:
        target = os.readlink("/proc/self/fd/%d" % fd)
    except OSError:
        continue  # the listing's own descriptor, closed by now
    held.append("%d->%s" % (fd, target))
    try:
        os.write(fd, b"written from the jail\n")
        held.append("wrote %d" % fd)
    except OSError:
        pass
    try:
        held.append("listed %d: %s" % (fd, sorted(os.listdir(fd))[:4]))
    except OSError:
        pass
print("OPEN " + "; ".join(held) if held else "HELD")
`

// inheritable opens path without close-on-exec and moves it to a high
// number, as a shell's exec 7</ does: what a caller of the library may
// hold when it starts a jail.
func inheritable(t *testing.T, path string, flags int) int {
	t.Helper()
	fd, err := unix.Open(path, flags, 0)
	if err != nil {
		t.Fatal(err)
	}
	high, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD, 100)
	unix.Close(fd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(high) })
	return high
}

// rootOnlyLog is an empty file only root may open, in a directory only
// root may enter.
func rootOnlyLog(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "only.log")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func wantUnwritten(t *testing.T, path string) {
	t.Helper()
	if b, err := os.ReadFile(path); err != nil || len(b) != 0 {
		t.Errorf("%s after the run: %q %v, want it empty", path, b, err)
	}
}

// A program using the library holds a descriptor on the host's / and one
// appending to a root-only file, neither close-on-exec, and starts a jail.
// Its init inherits both; the payload must hold neither: it would list the
// host's root and write the file. Only init's first step stands between
// (the process-wide mark is stockade's main's, not the library's).
func TestAttackCallerDescriptorReachesJail(t *testing.T) {
	needJail(t)
	log := rootOnlyLog(t)
	dir := inheritable(t, "/", unix.O_RDONLY|unix.O_DIRECTORY)
	file := inheritable(t, log, unix.O_WRONLY|unix.O_APPEND)
	r := mustRun(t, py(heldDescriptors))
	if r.Verdict != VerdictOK || r.Stdout != "HELD\n" {
		t.Errorf("with fds %d (/) and %d (%s) open in the caller: verdict %s, the payload says %q %s", dir, file, log, r.Verdict, r.Stdout, r.Stderr)
	}
	wantUnwritten(t, log)
}
