package jail

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/stockade/stockade/jail/internal/jailinit"
	"github.com/stockade/stockade/rootfs"
	"golang.org/x/sys/unix"
)

// Streams connects a run to its caller.
type Streams struct {
	Stdin  *os.File  // copied into the payload's stdin pipe (never passed as is); nil means /dev/null
	Stdout io.Writer // receives stdout as it comes, up to the limit; nil: capture only
	Stderr io.Writer
	// Notices receives stockade's own remarks made while setting up (such
	// as moving itself into a cgroup leaf); nil discards them.
	Notices io.Writer
	// Pass are handed to the payload on purpose as descriptors 3, 4, ...
	// (a server session's channel to its driver); the caller keeps its
	// own copies and closes them. Nothing else of stockade's reaches the
	// payload. They are here, not in Spec: a Spec is copied for every
	// jail of a pool, and each jail needs descriptors of its own.
	Pass []*os.File
}

// maxPass bounds Streams.Pass: a channel or two, not a way around
// RLIMIT_NOFILE.
const maxPass = 8

// jailPath is the payload's PATH and where Args[0] is looked up.
var jailPath = []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

// Run runs spec in a fresh jail and waits for it to end. Every host
// resource it creates (run directory, cgroup, pipes, processes) is gone
// when it returns. A limit that ended the run is a Verdict in the Result;
// the error is non-nil only when the jail could not be set up, and then the
// Result says so too (verdict "error").
func Run(ctx context.Context, spec Spec, st Streams) (*Result, error) {
	p, err := Prepare(ctx, spec, st)
	if err != nil {
		return FailedResult(spec, err), err
	}
	defer p.Close()
	return p.Start(ctx, StartOptions{})
}

// newResult is a run's Result before anything happened: an error until
// the run says otherwise, with the isolation it goes without.
func newResult(spec Spec) *Result {
	res := &Result{Verdict: VerdictError, Cgroup: "none", Seccomp: spec.Seccomp,
		Limits: limitsOf(spec), BlockedSyscalls: []BlockedSyscall{}, Degraded: []string{}, Network: []NetworkDecision{}}
	if spec.Seccomp == SeccompOff {
		res.Degraded = append(res.Degraded, "seccomp: off (every system call allowed)")
	}
	if spec.Host.NoCgroup {
		res.Degraded = append(res.Degraded, "cgroup: none (no memory, CPU or pids limit; rlimits only)")
		if c := spec.Cgroup.CPUTime; c > 0 {
			// The tree's CPU time is counted only by the cgroup; what is
			// left holds each process alone, and later than asked.
			s := cpuBackstop(c)
			res.Degraded = append(res.Degraded, fmt.Sprintf("cpu_time: %v not enforced for the whole tree (no cgroup); each process alone is held to RLIMIT_CPU, SIGXCPU after %d s and SIGKILL after %d s", c, s, s+1))
		}
	}
	return res
}

// FailedResult is the Result of a run that could not be set up: verdict
// "error", the reason, and the exit status the CLI uses for it.
func FailedResult(spec Spec, err error) *Result {
	res := newResult(spec)
	setError(res, err)
	return res
}

func setError(res *Result, err error) {
	msg := err.Error()
	res.Verdict, res.Error, res.ExitCode = VerdictError, &msg, ExitJailError
	var se *SetupError
	if errors.As(err, &se) {
		res.ExitCode = se.ExitCode
	}
}

// prepare sets up everything on the host side, then starts init (launch).
// What it acquires is recorded in p, and Close releases it.
func (p *Prepared) prepare(ctx context.Context) error {
	spec, st := p.spec, p.st
	if err := spec.Validate(); err != nil {
		return setupError("spec", err)
	}
	if len(st.Pass) > maxPass || uint64(3+len(st.Pass)) > spec.Rlimits.OpenFiles {
		return setupError("spec", fmt.Errorf("%d descriptors to pass: at most %d, and within the open files limit %d with stdin, stdout and stderr", len(st.Pass), maxPass, spec.Rlimits.OpenFiles))
	}
	bpf, err := compileSeccomp(spec.Seccomp)
	if err != nil {
		return setupError("seccomp", err)
	}
	own, err := acquireOwnership(st.Notices)
	if err != nil {
		return setupError("run lock", err)
	}
	p.own = own
	// The bind-source policy reads /etc/passwd, the user database and the
	// temp directory (0.5-1 ms of every start-up); only a run with a host
	// path to check needs it. Without it every check refuses (see
	// sourcePolicy.read), so a path that skipped this fails closed.
	var pol sourcePolicy
	if spec.Workdir != "" || len(spec.ReadOnly) > 0 || spec.Rootfs != RootfsHost {
		pol = hostSourcePolicy()
	}
	id, err := chooseIdentity(spec, own.hostIDNum(), pol)
	if err != nil {
		var se *SetupError
		if errors.As(err, &se) {
			return se
		}
		return setupError("identity", err)
	}
	if spec.Workdir != "" {
		// What DIR is, and its clock as preparing begins (see settle).
		if p.seen, err = beginWorkSeen(spec.Workdir); err != nil {
			return setupError("workdir", err)
		}
	}
	for _, b := range spec.ReadOnly {
		st, err := pol.checkSource("--ro", b.Source)
		if err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			err = checkNoMountsBelow("--ro", b.Source)
		}
		if err != nil {
			return setupError("bind", err)
		}
	}
	var root []rootfs.Entry
	var rootChecked chan error
	if spec.Rootfs == RootfsHost {
		root, err = rootfs.Host()
	} else {
		if _, err := pol.checkSource("--rootfs", spec.Rootfs); err != nil {
			return setupError("rootfs", err)
		}
		// The check walks the whole tree: let it run while the run
		// directory and the cgroup are made.
		rootChecked = make(chan error, 1)
		go func() { rootChecked <- checkRoot(spec.Rootfs) }()
		root, err = rootfs.Dir(spec.Rootfs)
	}
	if err != nil {
		return setupError("rootfs", err)
	}
	// A fresh /work is a tmpfs inside the jail: no host directory.
	dir, err := newRunDir(own, -1, id.hostGID)
	if err != nil {
		own.leftovers = true // perhaps half made; the record names it
		return setupError("run directory", err)
	}
	p.dir = dir
	if !spec.Host.NoCgroup {
		if p.cg, err = newRunCgroup(spec, own, filepath.Base(dir.path), st.Notices); err != nil {
			own.leftovers = true // the record may name a group Create could not remove
			return setupError("cgroup", err)
		}
	}
	bootID, err := newBootID()
	if err != nil {
		return &SetupError{Step: "mount plan", Message: err.Error(), ExitCode: ExitJailError}
	}
	// The jail sees its own limits, not the host's (package procview);
	// without a cgroup it has none, and sees the host.
	view := &runView{}
	if !spec.Host.NoCgroup {
		if view, err = newRunView(spec); err != nil {
			return setupError("limits view", err)
		}
	}
	// matplotlib's font cache, unless the payload brings its own
	// MPLCONFIGDIR (as the run that builds the cache does).
	var extra []jailinit.Step
	if !hasEnv(spec.Env, "MPLCONFIGDIR") {
		extra = fontCacheSteps(ctx, spec, st.Notices)
	}
	steps, err := buildPlan(planInput{spec: spec, root: root, workdir: spec.Workdir, views: view.steps,
		extra: extra, custom: spec.Rootfs != RootfsHost, bootID: bootID})
	if err != nil {
		return setupError("mount plan", err)
	}
	cfg := &jailinit.Config{
		NewRoot: dir.root, Steps: steps, Hostname: spec.Hostname,
		Args: spec.Args, Env: jailEnv(spec, fontCacheEnv(extra)...), Path: jailPath,
		Rlimits: rlimitsFor(spec), SetGroups: id.setGroups, Seccomp: spec.Seccomp, SeccompBPF: bpf,
		CPUs: view.cpus,
	}
	if spec.Network.Enabled() {
		cfg.ProxyPort = ProxyPort
	}
	for i := range st.Pass {
		cfg.PassFDs = append(cfg.PassFDs, jailinit.FirstPassFD+i)
	}
	if rootChecked != nil {
		if err := <-rootChecked; err != nil {
			return setupError("rootfs", err)
		}
	}
	if spec.Workdir != "" {
		// Just before the overlay: the clock against which copy-back
		// tells the host's changes from the jail's.
		if err := p.seen.settle(spec.Workdir); err != nil {
			return setupError("workdir", err)
		}
	}
	p.id = id
	return p.launch(ctx, id, cfg)
}

// checkRoot runs `stockade rootfs check` on a prepared root before every
// run. Its verdict is kept in the caller's own run base directory under
// the tree's fingerprint (rootfs.CheckCached), so a tree that has not
// changed since it passed skips the costly part, and a changed one is
// checked again.
func checkRoot(dir string) error {
	cache := ""
	// Never a fallback base (see newFallback): that one is made per run.
	if base := RunBase(); ensureBase(base) == nil {
		cache = filepath.Join(base, "checked-roots")
	}
	probs := rootfs.CheckCached(dir, cache)
	if len(probs) == 0 {
		return nil
	}
	return fmt.Errorf("--rootfs %s cannot serve as a jail's root: %s (%d problems in all; `stockade rootfs check %s` lists them)", dir, probs[0], len(probs), dir)
}

// jailEnv is the payload's environment: the fixed variables and the
// run's own (such as matplotlib's MPLCONFIGDIR), each replaced by a
// spec.Env entry of the same name, then the rest of spec.Env. A name
// appears once: with two, libc's getenv reads the first and Python's
// os.environ the last, and the payload's parts would disagree.
func jailEnv(spec Spec, run ...string) []string {
	env := append([]string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=/work", "LANG=C.UTF-8", "USER=" + JailUser, "LOGNAME=" + JailUser,
		"PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1",
		// Debian's EXTERNALLY-MANAGED marker (PEP 668) stops every pip
		// install before pip looks at the index, with advice (apt, a
		// venv) that a jail cannot follow, so an offline run never
		// learned that the network was missing. What the marker guards,
		// the system's packages, the jail cannot write anyway (a
		// read-only root, an unprivileged user): pip installs into
		// ~/.local (/work) instead, or fails on the network.
		"PIP_BREAK_SYSTEM_PACKAGES=1",
	}, run...)
	env = append(env, proxyEnv(spec.Network)...)
	index := make(map[string]int, len(env))
	for i, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		index[k] = i
	}
	for _, kv := range spec.Env {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := index[k]; ok {
			env[i] = kv
			continue
		}
		index[k] = len(env)
		env = append(env, kv)
	}
	return env
}

func hasEnv(env []string, key string) bool {
	for _, kv := range env {
		if strings.HasPrefix(kv, key+"=") {
			return true
		}
	}
	return false
}

// jailMsgQueueBytes is what one jail may hold in POSIX message queues, the
// kernel's default RLIMIT_MSGQUEUE.
const jailMsgQueueBytes = 819200

// uncapJailQueues lifts stockade's own RLIMIT_MSGQUEUE. Since Linux 5.14 a
// jail's message queue bytes are counted twice: for the jail user in the
// jail's user namespace, against the payload's own RLIMIT_MSGQUEUE, and for
// the namespace's creator (root, for every jail) in the host's, against the
// creator's RLIMIT_MSGQUEUE at the time of the clone. With the default
// there, one jail's queues made mq_open fail with EMFILE in every other
// jail. Without a cap at the creator, each jail keeps its own allowance
// (restored by init, see rlimitsFor), and the messages themselves are
// charged to the jail's memory cgroup. Raising it takes CAP_SYS_RESOURCE;
// without it (a container's root) the jails keep sharing one allowance, a
// limit docs/security.md lists, and the run goes ahead: queues are a nicety, not
// isolation. A normal user's jails are all that user anyway.
func uncapJailQueues() {
	if os.Geteuid() != 0 {
		return
	}
	inf := unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY}
	_ = unix.Setrlimit(unix.RLIMIT_MSGQUEUE, &inf)
}

func rlimitsFor(spec Spec) []jailinit.Rlimit {
	fsize := spec.Rlimits.FileSize
	if fsize == 0 {
		fsize = unix.RLIM_INFINITY
	}
	r := []jailinit.Rlimit{
		{Resource: unix.RLIMIT_CORE, Cur: 0, Max: 0},
		{Resource: unix.RLIMIT_NOFILE, Cur: spec.Rlimits.OpenFiles, Max: spec.Rlimits.OpenFiles},
		{Resource: unix.RLIMIT_FSIZE, Cur: fsize, Max: fsize},
		// The kernel's default, restored here for the payload: stockade
		// itself runs without one (see uncapJailQueues).
		{Resource: unix.RLIMIT_MSGQUEUE, Cur: jailMsgQueueBytes, Max: jailMsgQueueBytes},
	}
	if c := spec.Cgroup.CPUTime; c > 0 {
		// The per-process backstop under the cgroup poll (and the only CPU
		// limit without a cgroup): a little more than the limit, so that
		// the poll normally ends the run first. The soft limit sends
		// SIGXCPU, the hard one a second later SIGKILL.
		s := cpuBackstop(c)
		r = append(r, jailinit.Rlimit{Resource: unix.RLIMIT_CPU, Cur: s, Max: s + 1})
	}
	return r
}

// cpuBackstop is the soft RLIMIT_CPU, in seconds, under a CPU-time limit
// of c: a little more than c, so that the cgroup's poll normally ends the
// run first (the hard limit is a second later).
func cpuBackstop(c time.Duration) uint64 { return uint64(c/time.Second) + 2 }

// launch starts init, sends it the plan and waits until the payload has
// started (or setup failed). Every file it opens is closed by Close.
func (p *Prepared) launch(ctx context.Context, id identity, cfg *jailinit.Config) error {
	spec, st, cg := p.spec, p.st, p.cg
	socks, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("control socket: %w", err)
	}
	parentSock := os.NewFile(uintptr(socks[0]), "control")
	childSock := os.NewFile(uintptr(socks[1]), "control")
	p.files = append(p.files, parentSock)
	defer childSock.Close()

	outR, outW, err := os.Pipe()
	if err != nil {
		return err
	}
	p.files = append(p.files, outR)
	defer outW.Close()
	growPipe(outR)
	errR, errW, err := os.Pipe()
	if err != nil {
		return err
	}
	p.files = append(p.files, errR)
	defer errW.Close()
	growPipe(errR)

	uncapJailQueues()
	initExePath, initFile, err := initPath()
	if err != nil {
		return setupError("start jail", err)
	}
	if initFile != nil {
		defer initFile.Close()
	}
	cmd := &exec.Cmd{
		Path: initExePath,
		Args: []string{jailinit.Arg0},
		// One P for init's Go runtime: it starts threads up to GOMAXPROCS
		// (the host's CPU count on v1, where init is placed in the run's
		// cgroup only after it starts), and the pids limit counts every one
		// of them against the payload. On a many-core host that would eat
		// the room MinPids leaves.
		Env:        []string{"GOMAXPROCS=1"},
		Stdout:     outW,
		Stderr:     errW,
		ExtraFiles: append([]*os.File{childSock}, st.Pass...),
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID |
				unix.CLONE_NEWNET | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS,
			UidMappings:                []syscall.SysProcIDMap{{ContainerID: JailUID, HostID: id.hostUID, Size: 1}},
			GidMappings:                []syscall.SysProcIDMap{{ContainerID: JailGID, HostID: id.hostGID, Size: 1}},
			GidMappingsEnableSetgroups: id.setGroups,
			// Init runs as the jail user from the start: files it creates
			// on its tmpfs need an owner mapped in the namespace (host root
			// is not), and it keeps what it needs as ambient capabilities,
			// which exist only inside the jail's user namespace.
			Credential:  &syscall.Credential{Uid: JailUID, Gid: JailGID, Groups: []uint32{}, NoSetGroups: !id.setGroups},
			AmbientCaps: jailinit.InitCaps,
			Setsid:      true,
			// The jail dies with stockade: init gets SIGKILL when the
			// thread that started it exits, and takes the namespace along.
			Pdeathsig: syscall.SIGKILL,
		},
	}
	placed := false
	if cg != nil {
		// cgroup v2: clone3 puts init straight into the run's cgroup.
		if fd, ok := cg.group.CgroupFD(); ok {
			cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
			placed = true
		}
	}
	// cgroup v1: init is placed after it starts and waits for that.
	cfg.WaitPlacement = cg != nil && !placed
	var pump *stdinPump
	if st.Stdin != nil {
		if pump, err = newStdinPump(st.Stdin); err != nil {
			return setupError("start jail", err)
		}
		p.pump = pump // Close stops it
		cmd.Stdin = pump.jailEnd
	}
	// Refusals are told as they happen when the run streams; with --json
	// they are in the result alone.
	var notices io.Writer
	if st.Stderr != nil {
		notices = st.Notices
	}
	if p.net, err = newRunNetwork(spec.Network, spec.Host, notices); err != nil {
		return &SetupError{Step: "network", Message: err.Error(), ExitCode: ExitJailError}
	}
	p.stdout = &capture{limit: spec.OutputLimit, stream: st.Stdout}
	p.stderr = &capture{limit: spec.OutputLimit, stream: st.Stderr}

	sv := &supervision{cmd: cmd, sock: int(parentSock.Fd()), cg: cg, net: p.net, proxied: spec.Network.Enabled()}
	sv.supervisorCPUs, sv.jailCPU = supervisorCPUs(spec, cg)
	if err := sv.launch(); err != nil {
		return setupError("start jail", explainStart(err))
	}
	p.sv = sv
	outW.Close()
	errW.Close()
	childSock.Close()
	if pump != nil {
		pump.afterStart()
	}
	p.drained = make(chan struct{}, 2)
	pace := newDrainPace(spec.Cgroup.CPUs, sv.jailCPU, sv.exited)
	go func() { p.stdout.drain(outR, pace); p.drained <- struct{}{} }()
	go func() { p.stderr.drain(errR, pace); p.drained <- struct{}{} }()

	var place func() error
	if cfg.WaitPlacement {
		place = func() error { return cg.group.AddProc(cmd.Process.Pid) }
	}
	sv.sendPlan(cfg, place)
	if !sv.waitReady(ctx, spec.Timeout) {
		// Setup failed or was cut short: collect init's reason (or the
		// timeout or cancellation that ended it, which Start then reports).
		sv.kill()
		sv.finish()
		p.ended = true
		return p.collect()
	}
	return nil
}

// collect waits for the output and fills in the Result once init has been
// reaped, copies a --workdir's writes back, then reads and removes the
// run's cgroup.
func (p *Prepared) collect() error {
	<-p.drained
	<-p.drained
	res, sv, cg := p.res, p.sv, p.cg
	// Init is reaped: no connection can come any more, and the proxy's
	// open tunnels end with the jail.
	p.net.close()
	res.Network = p.net.decisions()
	res.Stdout, res.Stderr = p.stdout.buf.String(), p.stderr.buf.String()
	res.StdoutBytes, res.StderrBytes = p.stdout.total, p.stderr.total
	res.StdoutTruncated, res.StderrTruncated = p.stdout.truncated(), p.stderr.truncated()
	var end ending
	err := sv.result(res, &end)
	if fd, ok := sv.work.root(); ok && p.spec.Workdir != "" {
		// The jail is gone: nothing writes the upper layer any more. The
		// copy counts against the run's time: it may take what --timeout
		// left of it (copyBackGrace at least).
		cb, cerr := copyBack(fd, p.spec.Workdir, p.seen, copyBackLimitsFor(p.spec, p.deadline, time.Now()))
		res.CopyBack, res.CopyBackMs = cb, cb.Ms
		if cerr != nil && err == nil {
			err = setupError("copy /work back", cerr)
		}
	}
	res.WorkPeakBytes, res.WorkPeakInodes = sv.work.last()
	end.DiskFull = sv.work.full
	if cg != nil {
		if cerr := cg.finish(res, &end); cerr != nil && err == nil {
			err = setupError("cgroup", cerr)
		}
	}
	if err != nil {
		return err // Run makes the verdict "error"
	}
	res.Verdict = end.verdict()
	return nil
}

// supervisorCPUs is the CPU limit that bounds stockade's answering of a
// run's refused system calls. With the run's cgroup, the supervisor reads
// the jail's own CPU counter and spends only what the jail leaves of the
// limit, so jail and supervisor together stay within it. Without one (the
// jail's CPU is then neither limited nor seen) the supervisor takes half
// of --cpus, as a jail looping on refused calls spends about as much per
// call as the supervisor does.
func supervisorCPUs(spec Spec, cg *runCgroup) (float64, func() (time.Duration, error)) {
	if cg == nil {
		return spec.Cgroup.CPUs / 2, nil
	}
	return spec.Cgroup.CPUs, cg.group.CPUUsage
}

// explainStart turns a failed clone into the reason a user can act on.
func explainStart(err error) error {
	if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.ENOSPC) {
		hint := readSysctl("/proc/sys/user/max_user_namespaces")
		if hint == "0" {
			return fmt.Errorf("%w: user namespaces are disabled (user.max_user_namespaces = 0)", err)
		}
		if readSysctl("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == "1" && os.Geteuid() != 0 {
			return fmt.Errorf("%w: AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns = 1, as on Ubuntu 24.04); allow it with an AppArmor profile for stockade granting `userns`, or run as root", err)
		}
		if readSysctl("/proc/sys/kernel/unprivileged_userns_clone") == "0" && os.Geteuid() != 0 {
			return fmt.Errorf("%w: unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone = 0)", err)
		}
		return fmt.Errorf("%w: the kernel refused new namespaces (inside a container, its seccomp profile or missing CAP_SYS_ADMIN usually forbids them); see `stockade doctor`", err)
	}
	return err
}

func readSysctl(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// newBootID is a random version 4 UUID in the kernel's boot_id format.
func newBootID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("boot id: %w", err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]), nil
}
