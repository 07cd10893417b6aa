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

// IsChild reports whether this process is a jail's init. The binary's main
// (and TestMain of packages that run jails) must call ChildMain first thing
// when it is: without an embedded init binary, Run re-executes
// /proc/self/exe as init.
func IsChild() bool { return jailinit.IsInit() }

// ChildMain is init. It never returns.
func ChildMain() { jailinit.Main() }
