package jail

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/stockade/stockade/jail/internal/jailinit"
	"golang.org/x/sys/unix"
)

// The steps below start init, send it the plan and wait until the payload
// has started (or setup failed). Every file they open is closed by Close,
// and init's ends of them by closeChildEnds as prepare returns.

func (s *preparation) openControl() error {
	socks, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("control socket: %w", err)
	}
	s.parentSock = os.NewFile(uintptr(socks[0]), "control")
	s.childSock = os.NewFile(uintptr(socks[1]), "control")
	s.p.files = append(s.p.files, s.parentSock)
	return nil
}

func (s *preparation) openPipes() (err error) {
	if s.outR, s.outW, err = os.Pipe(); err != nil {
		return err
	}
	s.p.files = append(s.p.files, s.outR)
	growPipe(s.outR)
	if s.errR, s.errW, err = os.Pipe(); err != nil {
		return err
	}
	s.p.files = append(s.p.files, s.errR)
	growPipe(s.errR)
	return nil
}

func (s *preparation) findInit() (err error) {
	uncapJailQueues()
	if s.initExe, s.initFile, err = initPath(); err != nil {
		return setupError("start jail", err)
	}
	return nil
}

// describeInit is init's command: its namespaces, the jail user's id
// maps, the capabilities it keeps, and on cgroup v2 the cgroup it is
// cloned into.
func (s *preparation) describeInit() error {
	id, cg := s.id, s.p.cg
	path, extra := initExec(s.initExe, s.initFile, append([]*os.File{s.childSock}, s.p.st.Pass...))
	s.cmd = &exec.Cmd{
		Path: path,
		Args: []string{jailinit.Arg0},
		// One P for init's Go runtime: it starts threads up to GOMAXPROCS
		// (the host's CPU count on v1, where init is placed in the run's
		// cgroup only after it starts), and the pids limit counts every one
		// of them against the payload. On a many-core host that would eat
		// the room MinPids leaves.
		Env:        []string{"GOMAXPROCS=1"},
		Stdout:     s.outW,
		Stderr:     s.errW,
		ExtraFiles: extra,
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
			s.cmd.SysProcAttr.UseCgroupFD, s.cmd.SysProcAttr.CgroupFD = true, fd
			placed = true
		}
	}
	// cgroup v1: init is placed after it starts and waits for that.
	s.cfg.WaitPlacement = cg != nil && !placed
	s.cfg.TimeNSUsable = timeNSKnownUsable()
	s.cfg.Phases = s.p.trace != nil
	return nil
}

func (s *preparation) startPump() error {
	if s.p.st.Stdin == nil {
		return nil
	}
	pump, err := newStdinPump(s.p.st.Stdin)
	if err != nil {
		return setupError("start jail", err)
	}
	s.p.pump = pump // Close stops it
	s.cmd.Stdin = pump.jailEnd
	return nil
}

func (s *preparation) openNetwork() (err error) {
	p := s.p
	spec, st := p.spec, p.st
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
	return nil
}

// cloneInit starts init, closes stockade's copies of init's ends, and
// starts draining its output.
func (s *preparation) cloneInit() error {
	p := s.p
	spec, cg := p.spec, p.cg
	sv := &supervision{cmd: s.cmd, sock: int(s.parentSock.Fd()), cg: cg, net: p.net, proxied: spec.Network.Enabled(), trace: p.trace}
	sv.supervisorCPUs, sv.jailCPU = supervisorCPUs(spec, cg)
	if err := sv.launch(); err != nil {
		return setupError("start jail", explainStart(err))
	}
	p.sv = sv
	s.outW.Close()
	s.errW.Close()
	s.childSock.Close()
	if p.pump != nil {
		p.pump.afterStart()
	}
	p.drained = make(chan struct{}, 2)
	pace := newDrainPace(spec.Cgroup.CPUs, sv.jailCPU, sv.exited)
	outR, errR := s.outR, s.errR
	go func() { p.stdout.drain(outR, pace); p.drained <- struct{}{} }()
	go func() { p.stderr.drain(errR, pace); p.drained <- struct{}{} }()
	return nil
}

// sendPlan gives init its plan and, on cgroup v1, places it in the run's
// cgroup. A failure is noted in the supervision and kills init, and
// waitPayload collects it.
func (s *preparation) sendPlan() error {
	cg, cmd := s.p.cg, s.cmd
	var place func() error
	if s.cfg.WaitPlacement {
		place = func() error {
			s.p.trace.mark("place init in the cgroup (v1)")
			return cg.group.AddProc(cmd.Process.Pid)
		}
	}
	s.p.sv.sendPlan(s.cfg, place)
	return nil
}

func (s *preparation) waitPayload() error {
	p, sv := s.p, s.p.sv
	if !sv.waitReady(s.ctx, p.spec.Timeout) {
		// Setup failed or was cut short: collect init's reason (or the
		// timeout or cancellation that ended it, which Start then reports).
		sv.kill()
		sv.finish()
		p.ended = true
		return p.collect()
	}
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
