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
// of it (the path is then "", see initExec): nothing in the jail can write
// to it, and /proc/1/exe there leads to it rather than to the stockade
// binary on the host.
func initPath() (string, *os.File, error) {
	if len(initExe) == 0 {
		return "/proc/self/exe", nil, nil
	}
	fd, err := unix.MemfdCreate("jailinit", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return "", nil, fmt.Errorf("memfd for init: %w", err)
	}
	f := os.NewFile(uintptr(fd), "jailinit")
	if _, err := f.Write(initExe); err != nil {
		f.Close()
		return "", nil, fmt.Errorf("write init: %w", err)
	}
	seals := unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		f.Close()
		return "", nil, fmt.Errorf("seal init: %w", err)
	}
	return "", f, nil
}

// initExec returns the path init is executed from and the descriptors it
// is given beyond 0-2 (extra, then the memfd if there is one). The memfd
// goes in as the last of them and is executed by its number in the child,
// 3+index, which the child's descriptor set-up makes it and nothing after
// touches. Its number in this process must not be used instead: Go's
// forkExec moves its error pipe, and any passed descriptor numbered below
// its place, to one above the highest descriptor passed, and on, in the
// child, overwriting whatever was there. A memfd that happened to hold
// that number was replaced by the pipe before execve read
// /proc/self/fd/N (EACCES: not a regular file), about one run in 25
// under a server's load. Init closes its copy first thing (it is not
// among Config.PassFDs, so fds.CloseInherited takes it).
func initExec(exe string, memfd *os.File, extra []*os.File) (string, []*os.File) {
	if memfd == nil {
		return exe, extra
	}
	extra = append(extra[:len(extra):len(extra)], memfd)
	return "/proc/self/fd/" + strconv.Itoa(3+len(extra)-1), extra
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
