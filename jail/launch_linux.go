package jail

import (
	"context"
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
