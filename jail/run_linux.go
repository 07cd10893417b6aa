package jail

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

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
		Limits: LimitsOf(spec), BlockedSyscalls: []BlockedSyscall{}, Degraded: []string{}, Network: []NetworkDecision{}}
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

// prepare sets up everything on the host side, then starts init: the
// steps of prepareSteps, in order, each failing closed with the step the
// user is told (SetupError.Step). What it acquires is recorded in p, and
// Close releases it.
func (p *Prepared) prepare(ctx context.Context) error {
	s := &preparation{p: p, ctx: ctx}
	defer s.closeChildEnds()
	for _, st := range prepareSteps(s) {
		p.trace.mark(st.name)
		if err := st.fn(); err != nil {
			return err
		}
	}
	return nil
}

// prepStep is one line of the host side's preparation.
type prepStep struct {
	name string
	fn   func() error
}

// prepareSteps is the host side's preparation, in the order its resources
// depend on one another: the spec checked and the filter compiled before
// anything exists on the host; the run lock before the run directory and
// cgroup it records for a sweep; the jail's identity before the run
// directory (its group owns it) and the root's sources (checked as the
// caller could read them); the cgroup and every part of init's plan before
// the clone; then init cloned, given its plan (and on cgroup v1 placed),
// and the payload waited for. Each step's error names what the user is
// told failed; several lines share one such name ("start jail").
func prepareSteps(s *preparation) []prepStep {
	return []prepStep{
		{"check the spec", s.checkSpec},
		{"compile seccomp", s.compileSeccomp},
		{"take the run lock", s.takeRunLock},
		{"choose the identity", s.chooseIdentity},
		{"note the workdir", s.noteWorkdir},
		{"check the read-only binds", s.checkBinds},
		{"list the root", s.listRoot},
		{"make the run directory", s.makeRunDir},
		{"make the cgroup", s.makeCgroup},
		{"render the views", s.renderViews},
		{"plan the mounts", s.planMounts},
		{"wait for the root check", s.waitRootCheck},
		{"settle the workdir", s.settleWorkdir},
		{"open the control socket", s.openControl},
		{"open the output pipes", s.openPipes},
		{"find init", s.findInit},
		{"describe init", s.describeInit},
		{"start the stdin pump", s.startPump},
		{"open the network", s.openNetwork},
		{"clone init", s.cloneInit},
		{"send the plan", s.sendPlan},
		{"wait for the payload", s.waitPayload},
	}
}

// preparation is what the steps of one prepare hand one another.
type preparation struct {
	p   *Prepared
	ctx context.Context

	bpf         []byte       // the compiled filter
	pol         sourcePolicy // what host paths the caller may bind
	id          identity
	root        []rootfs.Entry
	rootChecked chan error // a custom root's check, running meanwhile
	bootID      string
	view        *runView
	cfg         *jailinit.Config

	// Launching init.
	parentSock, childSock *os.File
	outR, outW            *os.File
	errR, errW            *os.File
	initExe               string
	initFile              *os.File
	cmd                   *exec.Cmd
}

// closeChildEnds closes stockade's copies of what init was given (its
// ends of the socket and pipes, the init binary's memfd) on every path:
// once init has them, ours would hold the pipes open past its end.
func (s *preparation) closeChildEnds() {
	for _, f := range []*os.File{s.childSock, s.outW, s.errW, s.initFile} {
		if f != nil {
			f.Close()
		}
	}
}

func (s *preparation) checkSpec() error {
	spec, st := s.p.spec, s.p.st
	if err := spec.Validate(); err != nil {
		return setupError("spec", err)
	}
	if spec.Isolation == IsolationVM {
		// The VM tier is package vmtier's: a caller that hands such a
		// Spec here would get one wall where the profile asked for two.
		return setupError("spec", errors.New(`isolation "vm": this caller runs jails on the host's kernel only (the VM tier runs through stockade run and package vmtier; see docs/isolation.md)`))
	}
	if len(st.Pass) > maxPass || uint64(3+len(st.Pass)) > spec.Rlimits.OpenFiles {
		return setupError("spec", fmt.Errorf("%d descriptors to pass: at most %d, and within the open files limit %d with stdin, stdout and stderr", len(st.Pass), maxPass, spec.Rlimits.OpenFiles))
	}
	return nil
}

func (s *preparation) compileSeccomp() (err error) {
	if s.bpf, err = compileSeccomp(s.p.spec.Seccomp); err != nil {
		return setupError("seccomp", err)
	}
	return nil
}

func (s *preparation) takeRunLock() error {
	own, err := acquireOwnership(s.p.st.Notices)
	if err != nil {
		return setupError("run lock", err)
	}
	s.p.own = own
	return nil
}

func (s *preparation) chooseIdentity() error {
	spec := s.p.spec
	// The bind-source policy reads /etc/passwd, the user database and the
	// temp directory (0.5-1 ms of every start-up); only a run with a host
	// path to check needs it. Without it every check refuses (see
	// sourcePolicy.read), so a path that skipped this fails closed.
	if spec.Workdir != "" || len(spec.ReadOnly) > 0 || spec.Rootfs != RootfsHost {
		s.pol = hostSourcePolicy()
	}
	id, err := chooseIdentity(spec, s.p.own.hostIDNum(), s.pol)
	if err != nil {
		var se *SetupError
		if errors.As(err, &se) {
			return se
		}
		return setupError("identity", err)
	}
	s.id = id
	return nil
}

func (s *preparation) noteWorkdir() (err error) {
	if s.p.spec.Workdir == "" {
		return nil
	}
	// What DIR is, and its clock as preparing begins (see settle).
	if s.p.seen, err = beginWorkSeen(s.p.spec.Workdir); err != nil {
		return setupError("workdir", err)
	}
	return nil
}

func (s *preparation) checkBinds() error {
	for _, b := range s.p.spec.ReadOnly {
		st, err := s.pol.checkSource("--ro", b.Source)
		if err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			err = checkNoMountsBelow("--ro", b.Source)
		}
		if err != nil {
			return setupError("bind", err)
		}
	}
	return nil
}

func (s *preparation) listRoot() (err error) {
	spec := s.p.spec
	if spec.Rootfs == RootfsHost {
		s.root, err = rootfs.Host()
	} else {
		if _, err := s.pol.checkSource("--rootfs", spec.Rootfs); err != nil {
			return setupError("rootfs", err)
		}
		// The check walks the whole tree: let it run while the run
		// directory and the cgroup are made.
		s.rootChecked = make(chan error, 1)
		go func(ch chan<- error) { ch <- checkRoot(spec.Rootfs) }(s.rootChecked)
		s.root, err = rootfs.Dir(spec.Rootfs)
	}
	if err != nil {
		return setupError("rootfs", err)
	}
	return nil
}

func (s *preparation) makeRunDir() error {
	// A fresh /work is a tmpfs inside the jail: no host directory.
	dir, err := newRunDir(s.p.own, -1, s.id.hostGID)
	if err != nil {
		s.p.own.leftovers = true // perhaps half made; the record names it
		return setupError("run directory", err)
	}
	s.p.dir = dir
	return nil
}

func (s *preparation) makeCgroup() (err error) {
	p := s.p
	if p.spec.Host.NoCgroup {
		return nil
	}
	if p.cg, err = newRunCgroup(p.spec, p.own, filepath.Base(p.dir.path), p.st.Notices); err != nil {
		p.own.leftovers = true // the record may name a group Create could not remove
		return setupError("cgroup", err)
	}
	return nil
}

func (s *preparation) renderViews() (err error) {
	if s.bootID, err = newBootID(); err != nil {
		return &SetupError{Step: "mount plan", Message: err.Error(), ExitCode: ExitJailError}
	}
	// The jail sees its own limits, not the host's (package procview);
	// without a cgroup it has none, and sees the host.
	s.view = &runView{}
	if !s.p.spec.Host.NoCgroup {
		if s.view, err = newRunView(s.p.spec); err != nil {
			return setupError("limits view", err)
		}
	}
	return nil
}

func (s *preparation) planMounts() error {
	spec, st := s.p.spec, s.p.st
	// What the host keeps for the jail (such as matplotlib's font cache).
	extra, extraEnv, err := provisions(s.ctx, spec, st.Notices)
	if err != nil {
		return setupError("host provision", err)
	}
	steps, err := buildPlan(planInput{spec: spec, root: s.root, workdir: spec.Workdir, views: s.view.steps,
		extra: extra, custom: spec.Rootfs != RootfsHost, bootID: s.bootID})
	if err != nil {
		return setupError("mount plan", err)
	}
	s.cfg = &jailinit.Config{
		NewRoot: s.p.dir.root, Steps: steps, Hostname: spec.Hostname,
		Args: spec.Args, Env: jailEnv(spec, extraEnv...), Path: jailPath,
		Rlimits: rlimitsFor(spec), SetGroups: s.id.setGroups, Seccomp: spec.Seccomp, SeccompBPF: s.bpf,
		CPUs: s.view.cpus,
	}
	if spec.Network.Enabled() {
		s.cfg.ProxyPort = ProxyPort
	}
	for i := range st.Pass {
		s.cfg.PassFDs = append(s.cfg.PassFDs, jailinit.FirstPassFD+i)
	}
	return nil
}

func (s *preparation) waitRootCheck() error {
	if s.rootChecked == nil {
		return nil
	}
	if err := <-s.rootChecked; err != nil {
		return setupError("rootfs", err)
	}
	return nil
}

func (s *preparation) settleWorkdir() error {
	if s.p.spec.Workdir != "" {
		// Just before the overlay: the clock against which copy-back
		// tells the host's changes from the jail's.
		if err := s.p.seen.settle(s.p.spec.Workdir); err != nil {
			return setupError("workdir", err)
		}
	}
	s.p.id = s.id
	return nil
}
