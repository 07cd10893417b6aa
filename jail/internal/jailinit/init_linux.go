package jailinit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"github.com/stockade/stockade/internal/fds"
	"golang.org/x/sys/unix"
)

// Arg0 is the argv[0] of a jail's init; with fd 3 a socket, it
// marks a process as a jail's init.
const Arg0 = "jailinit"

// ctlFD is init's end of the control socket.
const ctlFD = 3

// IsInit reports whether this process is a jail's init: started with
// argv[0] Arg0 and a SOCK_SEQPACKET socket at fd 3, as pid 1. Argv and
// descriptors are whatever the caller of execve chose, so they alone would
// let anyone who can start a program importing package jail (a setuid or
// file-capability helper built on it) make it skip its main and run init's
// mounts and pivot_root with its privileges, from a config the caller
// writes. Pid 1 is what only Run arranges: init is the first process of
// the pid namespace it clones, and making one takes CAP_SYS_ADMIN in a
// user namespace, where a set-id or file-capability exec grants nothing
// (the file's owner and root id are not mapped there).
func IsInit() bool {
	if len(os.Args) != 1 || os.Args[0] != Arg0 || os.Getpid() != 1 {
		return false
	}
	t, err := unix.GetsockoptInt(ctlFD, unix.SOL_SOCKET, unix.SO_TYPE)
	return err == nil && t == unix.SOCK_SEQPACKET
}

// Main is init: it builds the jail from the parent's plan, starts the
// payload, reaps, and exits with the payload. It never returns.
func Main() {
	// The payload is forked from this thread after this thread alone has
	// become the jail user, so the goroutine must never move.
	runtime.LockOSThread()
	unix.CloseOnExec(ctlFD)
	// Run from a memfd, the kernel names us after its fd number; say
	// what we are in the host's ps.
	_ = unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&[]byte(Arg0 + "\x00")[0])), 0, 0, 0)
	// Init is pid 1 of its namespace; signals from the payload with no
	// handler are dropped by the kernel, but Go installs handlers (and
	// crashes on a kill()ed SIGABRT, SIGSEGV, SIGTRAP and the like), so
	// catch every one a payload could send and throw it away: the payload
	// must not be able to take init down and turn its run into a setup
	// error. Caught, not ignored: an ignored signal stays ignored across
	// execve, and the payload would start with SIGINT, SIGTERM and the
	// rest ignored (Python then never raises KeyboardInterrupt). Faults
	// init itself causes are still fatal.
	discard := make(chan os.Signal, 16)
	signal.Notify(discard, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT,
		syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGPIPE, syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGTSTP,
		syscall.SIGABRT, syscall.SIGTRAP, syscall.SIGILL, syscall.SIGSYS, syscall.SIGSEGV, syscall.SIGBUS,
		syscall.SIGFPE, syscall.SIGALRM, syscall.SIGVTALRM, syscall.SIGPROF, syscall.SIGXCPU, syscall.SIGXFSZ,
		syscall.SIGSTKFLT, syscall.SIGPWR, syscall.SIGIO)
	go func() {
		for range discard {
		}
	}()
	if err := defaultFaultSignals(); err != nil {
		fail("protect init from forged faults", err, ExitJailError)
	}

	cfg, err := readConfig()
	if err != nil {
		fail("read config", err, ExitJailError)
	}
	// Close-on-exec before anything else runs: the payload gets them only
	// where startPayload places them, and a step that closes what init
	// inherited without the flag keeps them.
	for _, fd := range cfg.PassFDs {
		if fd < FirstPassFD {
			fail("read config", fmt.Errorf("descriptor %d to pass: not one the parent passed (from %d up)", fd, FirstPassFD), ExitJailError)
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
			fail("read config", fmt.Errorf("descriptor %d to pass: %w", fd, err), ExitJailError)
		}
	}
	pid, err := contain(cfg)
	if err != nil {
		var se *SetupError
		if errors.As(err, &se) {
			send(Msg{Kind: MsgError, Step: se.Step, Message: se.Message, ExitCode: se.ExitCode})
			os.Exit(se.ExitCode)
		}
		fail("", err, ExitJailError)
	}
	reap(pid)
}

// contain is the jail's setup, one step per line in the order the kernel
// requires, through the payload's exec: what init inherited closed before
// anything else, the cgroup namespace after the parent placed us in the
// cgroup, mounts while still privileged, pivot_root, then identity and
// limits, the command looked up while init can still read everything, the
// privilege drop, descriptors marked for the exec, seccomp last, and the
// payload forked from this thread. It returns the payload's pid.
func contain(cfg *Config) (int, error) {
	var argv0 string
	var pid int
	for _, s := range containSteps(cfg, &argv0, &pid) {
		if err := s.fn(); err != nil {
			var se *SetupError
			if errors.As(err, &se) {
				return 0, se // carries its own step and exit status (126, 127)
			}
			return 0, &SetupError{Step: s.name, Message: err.Error(), ExitCode: ExitJailError}
		}
	}
	send(Msg{Kind: MsgStarted})
	return pid, nil
}

// step is one line of the containment sequence.
type step struct {
	name string
	fn   func() error
}

// containSteps is the containment sequence. lookPath stores the command's
// path in argv0 and the exec step the payload's pid in pid.
func containSteps(c *Config, argv0 *string, pid *int) []step {
	return []step{
		// First: a descriptor the caller of stockade left open without
		// close-on-exec (a shell's exec 7</, systemd's journal stream, a
		// flock wrapper's lock) was inherited by init across its execve.
		// Everything above the control socket that lacks the flag is that;
		// the descriptors the parent passed on purpose (Config.PassFDs)
		// were given the flag as the config arrived, and stay.
		{"close inherited descriptors", func() error { return fds.CloseInherited(ctlFD + 1) }},
		{"protect init", protectInit},
		{"make mounts private", func() error { return unix.Mount("", "/", "", unix.MS_SLAVE|unix.MS_REC, "") }},
		{"build root", func() error { return buildRoot(c.NewRoot, c.Steps) }},
		{"pivot_root", func() error { return pivotInto(c.NewRoot) }},
		{"set hostname", func() error { return unix.Sethostname([]byte(c.Hostname)) }},
		{"bring up loopback", loopbackUp},
		{"open the proxy's listener", func() error { return openProxyListener(c) }},
		{"chdir /work", func() error { return unix.Chdir("/work") }},
		{"set rlimits", func() error { return setRlimits(c) }},
		{"set CPU affinity", func() error { return setAffinity(c) }},
		{"wait for cgroup placement", func() error { return waitPlacement(c) }},
		// After placement: a cgroup namespace is rooted where its creator
		// stands when it is made, so the jail sees its own cgroup as /.
		{"unshare cgroup namespace", func() error { return unix.Unshare(unix.CLONE_NEWCGROUP) }},
		{"unshare time namespace", unshareTime},
		// It also forbids new namespaces, init's own included.
		{"limit per-user kernel objects", limitUserCounts},
		{"find command", func() (err error) { *argv0, err = lookPath(c.Args[0], c.Path); return err }},
		// From here this thread is the jail user with nothing left, and
		// only this thread: the payload must be forked from it.
		{"drop privileges", func() error { return becomeJailUser(c.SetGroups) }},
		// The payload gets 0-2, and the descriptors passed on purpose where
		// startPayload places them (3, 4, ...), and nothing else: every other descriptor
		// init holds (the control socket, Go's own, any a step opened) is
		// closed by the payload's execve. Read back before the filter,
		// which may refuse close_range or reading /proc; after this only
		// the filter's listener is opened, close-on-exec by the kernel.
		{"close descriptors above 2 on exec", func() error { return fds.CloseOnExecFrom(3) }},
		// Last before exec: the filter applies to init's thread too, and it
		// needs nothing more than fork and exec.
		{"load seccomp", func() error { return loadSeccomp(c.Seccomp, c.SeccompBPF) }},
		{"exec", func() (err error) { *pid, err = startPayload(*argv0, c); return err }},
	}
}

// startPayload forks and execs the payload from the current thread, with
// stdin, stdout, stderr and the descriptors passed on purpose as 3, 4, ...
// Init closes its own copies of those: the payload's end of a channel must
// be the payload's alone, so that its peer on the host sees the end of
// file when the payload is gone, not when init is.
func startPayload(argv0 string, c *Config) (int, error) {
	files := []uintptr{0, 1, 2}
	for _, fd := range c.PassFDs {
		files = append(files, uintptr(fd))
	}
	defer func() {
		for _, fd := range c.PassFDs {
			unix.Close(fd)
		}
	}()
	pid, err := syscall.ForkExec(argv0, c.Args, &syscall.ProcAttr{
		Dir:   "/work",
		Env:   c.Env,
		Files: files,
		// A new session: the payload has no controlling terminal, so a
		// TIOCSTI on an inherited tty fd cannot type into the caller's
		// shell (CVE-2017-5226); seccomp refuses TIOCSTI as well.
		Sys: &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		return 0, execError(c.Args[0], err)
	}
	return pid, nil
}

// protectInit makes init non-dumpable: its /proc entries become
// inaccessible to the payload, which runs as another uid with no
// capabilities, so it can neither read init's memory nor open /proc/1/exe
// (the path back to the stockade binary on the host, CVE-2019-5736).
func protectInit() error {
	return unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
}

// faultSignals are the signals Go's runtime takes for a fault (or a fatal
// trap) of init's own, whatever signal.Notify says, unless their si_code
// says kill() or tgkill() sent them. The payload runs as the uid of init's
// main thread, so the kernel lets it signal init with any other si_code:
// sigqueue (SI_QUEUE), or a descriptor it owns with F_SETOWN 1 and
// F_SETSIG (POLL_IN), and init crashed with a Go stack trace, the run with it.
var faultSignals = []unix.Signal{unix.SIGSEGV, unix.SIGBUS, unix.SIGFPE, unix.SIGILL,
	unix.SIGTRAP, unix.SIGSYS, unix.SIGSTKFLT}

// defaultFaultSignals gives faultSignals their default action, bypassing
// Go's handlers (the runtime offers no way to), and reads each back. The
// kernel drops a signal sent to a pid namespace's init from inside it while
// its action is the default, whatever the si_code; a real fault in init is
// forced through and still kills it, as Go's handler would have.
func defaultFaultSignals() error {
	for _, sig := range faultSignals {
		// struct kernel_sigaction: handler, flags, restorer, mask; all
		// zero is SIG_DFL with an empty mask.
		var act, old [4]uint64
		if _, _, errno := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig),
			uintptr(unsafe.Pointer(&act)), 0, 8, 0, 0); errno != 0 {
			return fmt.Errorf("rt_sigaction(%v, SIG_DFL): %w", sig, errno)
		}
		if _, _, errno := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig),
			0, uintptr(unsafe.Pointer(&old)), 8, 0, 0); errno != 0 || old[0] != 0 {
			return fmt.Errorf("rt_sigaction(%v): still handled (%#x, %v)", sig, old[0], errno)
		}
	}
	return nil
}

// pivotInto makes dir the root and detaches the old one, then makes the root
// tmpfs read-only. pivot_root(".", ".") stacks the old root on top of the
// new one at "/", so unmounting "." removes exactly the old root without
// needing a directory to park it in.
func pivotInto(dir string) error {
	if err := unix.Chdir(dir); err != nil {
		return fmt.Errorf("chdir %s: %w", dir, err)
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root %s: %w", dir, err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach old root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	// The root and /dev tmpfs belong to the jail user (init made them as
	// that user); read-only, owning them gives it nothing. Non-recursive:
	// /tmp, /work, /dev/shm and /dev/pts stay writable.
	for _, p := range []string{"/", "/dev"} {
		attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID}
		if p == "/" {
			attr.Attr_set |= unix.MOUNT_ATTR_NODEV
		}
		if err := unix.MountSetattr(unix.AT_FDCWD, p, 0, &attr); err != nil {
			return fmt.Errorf("remount %s read-only: %w", p, err)
		}
	}
	return nil
}

// userCounts are the jail user namespace's own limits on kernel objects
// that are charged, level by level, to every user namespace up to the
// host's, where they count against the creator: host root. Without a
// lower limit here, a jail could take all 128 of root's inotify instances
// and starve systemd and udev for as long as it runs. No namespaces at all:
// seccomp refuses unshare and new namespaces already; this is a second lock.
var userCounts = []struct {
	file  string
	value string
}{
	{"max_inotify_instances", "16"},
	{"max_inotify_watches", "8192"},
	{"max_fanotify_groups", "0"},
	{"max_fanotify_marks", "0"},
	{"max_user_namespaces", "0"},
	{"max_net_namespaces", "0"},
	{"max_mnt_namespaces", "0"},
	{"max_pid_namespaces", "0"},
	{"max_ipc_namespaces", "0"},
	{"max_uts_namespaces", "0"},
	{"max_cgroup_namespaces", "0"},
	{"max_time_namespaces", "0"},
}

// limitUserCounts writes userCounts into /proc/sys/user of the jail's user
// namespace (the new /proc; needs CAP_SYS_RESOURCE there). A kernel that
// lacks one of the files lacks that object; any other failure stops the run.
func limitUserCounts() error {
	for _, u := range userCounts {
		err := os.WriteFile("/proc/sys/user/"+u.file, []byte(u.value), 0)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("user.%s = %s: %w", u.file, u.value, err)
		}
	}
	return nil
}

func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("read lo flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("set lo up: %w", err)
	}
	return nil
}

// setAffinity pins this thread, and so the payload forked from it, to the
// CPUs of its limit: what os.sched_getaffinity and nproc report. It is a
// view, not the limit: the CPU quota is, and the payload widening its own
// mask gains it no CPU time.
func setAffinity(c *Config) error {
	if len(c.CPUs) == 0 {
		return nil
	}
	var set unix.CPUSet
	for _, cpu := range c.CPUs {
		set.Set(cpu)
	}
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("CPUs %v: %w", c.CPUs, err)
	}
	return nil
}

func setRlimits(c *Config) error {
	for _, r := range c.Rlimits {
		// syscall.Setrlimit, not unix: for RLIMIT_NOFILE it also stops Go
		// from restoring its startup limit in the children it forks.
		if err := syscall.Setrlimit(r.Resource, &syscall.Rlimit{Cur: r.Cur, Max: r.Max}); err != nil {
			return fmt.Errorf("resource %d: %w", r.Resource, err)
		}
	}
	return nil
}

// lookPath finds the command inside the jail, as execvp would.
func lookPath(name string, dirs []string) (string, error) {
	notFound := &SetupError{Step: "exec", Message: fmt.Sprintf("%s: command not found in the jail (PATH=%s)", name, strings.Join(dirs, ":")), ExitCode: ExitNotFound}
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, d := range dirs {
		p := d + "/" + name
		var st unix.Stat_t
		if unix.Stat(p, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Mode&0o111 != 0 {
			return p, nil
		}
	}
	return "", notFound
}

func execError(name string, err error) error {
	code := ExitCannotRun
	if errors.Is(err, syscall.ENOENT) {
		code = ExitNotFound
	}
	return &SetupError{Step: "exec", Message: fmt.Sprintf("%s: %v", name, err), ExitCode: code}
}

// reap waits for every child init has (double-forked daemons are
// re-parented here) until the payload itself exits, then reports and exits:
// the kernel kills what is left in the pid namespace when its init dies.
func reap(payload int) {
	for {
		var ws unix.WaitStatus
		var ru unix.Rusage
		pid, err := unix.Wait4(-1, &ws, 0, &ru)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			fail("wait", err, ExitJailError)
		}
		if pid == payload {
			send(Msg{Kind: MsgExit, Status: uint32(ws),
				UtimeUs: ru.Utime.Sec*1e6 + ru.Utime.Usec, StimeUs: ru.Stime.Sec*1e6 + ru.Stime.Usec,
				MaxRSS: ru.Maxrss})
			os.Exit(0)
		}
	}
}

func waitPlacement(c *Config) error {
	if !c.WaitPlacement {
		return nil
	}
	buf := make([]byte, 64)
	n, _, _, _, err := unix.Recvmsg(ctlFD, buf, nil, 0)
	if err != nil {
		return err
	}
	if string(buf[:n]) != GoMessage {
		return fmt.Errorf("unexpected message %q", buf[:n])
	}
	return nil
}

func readConfig() (*Config, error) {
	buf := make([]byte, MaxMsg)
	n, _, _, _, err := unix.Recvmsg(ctlFD, buf, nil, 0)
	if err != nil {
		return nil, err
	}
	var c Config
	if err := json.Unmarshal(buf[:n], &c); err != nil {
		return nil, err
	}
	if len(c.Args) == 0 {
		return nil, errors.New("no command in config")
	}
	return &c, nil
}

func send(m Msg) {
	b, _ := json.Marshal(m)
	sendRaw(b, nil)
}

func sendRaw(b, oob []byte) {
	// Nothing to do if the parent is gone: pdeathsig is about to kill us.
	_ = sendmsg(b, oob)
}

// sendmsg sends one message on the control socket from a thread other than
// this one. Once "load seccomp" ran, this locked thread carries the jail's
// filter, which shows every sendmsg to the supervisor: the listener's own
// hand-over would wait for a supervisor that cannot exist before it, and
// every later report would wait on a supervisor that may be slow (it pays
// with the jail's CPU) or gone. A goroutine never runs on a locked thread,
// and the runtime's other threads carry no filter: it is loaded without
// TSYNC, and the threads made after it come from the template thread
// started before it (see seccomp.Program.Load).
func sendmsg(b, oob []byte) error {
	errc := make(chan error, 1)
	go func() { errc <- unix.Sendmsg(ctlFD, b, oob, nil, 0) }()
	return <-errc
}

func fail(step string, err error, code int) {
	send(Msg{Kind: MsgError, Step: step, Message: err.Error(), ExitCode: code})
	os.Exit(code)
}

// unshareTime gives the payload (init's children; init itself stays where
// it is) a time namespace whose CLOCK_BOOTTIME starts at the jail's start.
// /proc/uptime and the start times in /proc/PID/stat read that clock, and
// the host's would tell how long the host has been up (its last reboot,
// so its patch level). CLOCK_MONOTONIC is left alone. A kernel without
// time namespaces (CONFIG_TIME_NS, Linux 5.6) shows the host's uptime, as
// before; any other failure stops the run.
//
// The kernel keeps the offsets with the thread group leader only
// (/proc/PID/timens_offsets has no per-thread twin), while unshare moves
// the calling thread: this works only on the main thread, where Main
// runs (the jailinit binary locks it in an init(); without it, package
// jail's init calls Main while the runtime still holds the main goroutine
// on the main thread). Elsewhere it is skipped.
func unshareTime() error {
	if unix.Gettid() != unix.Getpid() || !TimeNamespaceUsable() {
		return nil
	}
	if err := unix.Unshare(unix.CLONE_NEWTIME); err != nil {
		if errors.Is(err, unix.EINVAL) {
			return nil
		}
		return err
	}
	// Zero is init's own start (in clock ticks of 10 ms, rounded down), so
	// that init's start time, seen from the payload, is not negative.
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return err
	}
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(f) < 20 {
		return fmt.Errorf("/proc/self/stat: %q", stat)
	}
	ticks, err := strconv.ParseInt(f[19], 10, 64) // field 22, starttime
	if err != nil {
		return fmt.Errorf("/proc/self/stat starttime: %w", err)
	}
	start := ticks * 10_000_000 // USER_HZ is 100 on every Linux
	// The offset's nanoseconds must lie in [0, 1e9).
	sec, nsec := -(start/1_000_000_000)-1, 1_000_000_000-start%1_000_000_000
	if nsec == 1_000_000_000 {
		sec, nsec = sec+1, 0
	}
	off := fmt.Sprintf("%d %d %d\n", unix.CLOCK_BOOTTIME, sec, nsec)
	// Init is not dumpable (protectInit), which makes its /proc files
	// root's; for this one write it is, while nothing else runs in the
	// jail yet.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 1, 0, 0, 0); err != nil {
		return err
	}
	werr := os.WriteFile("/proc/self/timens_offsets", []byte(off), 0)
	if err := protectInit(); err != nil {
		return err
	}
	if werr != nil {
		return fmt.Errorf("boottime offset: %w", werr)
	}
	return nil
}

// TimeNamespaceUsable reports whether a process can start another while a
// time namespace is pending for its children. Go starts processes with
// clone(CLONE_VM|CLONE_VFORK), which kernels before the switch moved to
// exec (Linux 6.1 and older, at least) refuse with EINVAL then: there the
// payload could not be started at all. The probe runs on a thread of its
// own that is never unlocked, so the thread, and the namespace pending on
// it, end with the goroutine; the exec of "/" always fails.
func TimeNamespaceUsable() bool {
	ok := make(chan bool)
	go func() {
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWTIME); err != nil {
			ok <- false
			return
		}
		_, err := syscall.ForkExec("/", []string{"/"}, &syscall.ProcAttr{})
		ok <- err != nil && !errors.Is(err, syscall.EINVAL)
	}()
	return <-ok
}
