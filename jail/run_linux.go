package jail

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
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
