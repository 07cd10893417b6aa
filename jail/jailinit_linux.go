package jail

import (
	"fmt"
	"os"
	"strconv"

	"github.com/stockade/stockade/jail/internal/jailinit"
	"golang.org/x/sys/unix"
)

// initPath returns what to execute as the jail's init, and a file to close
// once it has started. With an embedded init, that is a sealed memfd copy
// of it: nothing in the jail can write to it, and /proc/1/exe there leads
// to it rather than to the stockade binary on the host. The fd is moved to
// 10 or above so that the child's fd set-up (0-3) cannot land on it before
// execve resolves /proc/self/fd/N.
func initPath() (string, *os.File, error) {
	if len(initExe) == 0 {
		return "/proc/self/exe", nil, nil
	}
	fd, err := unix.MemfdCreate("jailinit", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return "", nil, fmt.Errorf("memfd for init: %w", err)
	}
	high, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 10)
	unix.Close(fd)
	if err != nil {
		return "", nil, fmt.Errorf("memfd for init: %w", err)
	}
	f := os.NewFile(uintptr(high), "jailinit")
	if _, err := f.Write(initExe); err != nil {
		f.Close()
		return "", nil, fmt.Errorf("write init: %w", err)
	}
	seals := unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE
	if _, err := unix.FcntlInt(uintptr(high), unix.F_ADD_SEALS, seals); err != nil {
		f.Close()
		return "", nil, fmt.Errorf("seal init: %w", err)
	}
	return "/proc/self/fd/" + strconv.Itoa(high), f, nil
}

// init is the re-exec hook, the one init side effect the jail needs.
// Without an embedded init binary (a library user's program, a test
// binary, a plain go build) Run starts /proc/self/exe again as the jail's
// init; that process must become init before its own main runs, or it
// would run the program a second time inside the jail (and Run would see
// "jail init ended without a report"). Doing it here, rather than asking
// every main and TestMain to call it, means no program that imports jail
// can forget. Package initialisation runs on the main thread (the runtime
// locks it there until main), which init needs: the time namespace's
// offsets belong to the thread group leader. The check costs nothing
// otherwise: init is started with argv[0] jailinit.Arg0 alone, which no
// command line from a user has, as pid 1 of its new pid namespace, which
// no caller of execve can arrange, and only then is fd 3 looked at.
func init() {
	if jailinit.IsInit() {
		jailinit.Main()
	}
}

// IsChild reports whether this process is a jail's init. It is always
// false by the time a program's main runs: the package's own init has
// taken such a process over. It remains for programs that still call it.
func IsChild() bool { return jailinit.IsInit() }

// ChildMain is init; it never returns. The package's init calls it when
// this process is a jail's init, so no program needs to.
func ChildMain() { jailinit.Main() }
