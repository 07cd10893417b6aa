package vmtier

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/stockade/stockade/cgroup"
	"github.com/stockade/stockade/internal/runlock"
	"github.com/stockade/stockade/jail"
	"golang.org/x/sys/unix"
)

// The VM tier's verdicts: how a run ends when its guest, not its payload,
// failed. Each is an error (exit 125), never "ok"; the guest's own jail's
// verdicts come back as the guest's jail made them.
const (
	VerdictPanic    jail.Verdict = "vm_panic"     // the guest kernel panicked
	VerdictDied     jail.Verdict = "vm_died"      // the VMM exited or was killed before the guest answered
	VerdictConsole  jail.Verdict = "vm_console"   // the guest wrote more to its console than the bound
	VerdictNoAnswer jail.Verdict = "vm_no_answer" // the guest did not come up, or did not answer, in time
)

// EmulateEnv, set to 1, lets the VM tier run without /dev/kvm, as
// --vm-emulate and a profile's vm_emulate = true do.
const EmulateEnv = "STOCKADE_VM_EMULATE"

// KernelEnv names the guest kernel (a bzImage, such as Debian's vmlinuz);
// the default is vmlinuz in the VM tier's cache directory.
const KernelEnv = "STOCKADE_VM_KERNEL"

// CacheEnv names the directory the guest's initramfs is built into once
// (default: the host's cache directory's vm/).
const CacheEnv = "STOCKADE_VM_CACHE"

// Bounds of the channel and the console.
const (
	maxPlan       = 256 << 20
	consoleLimit  = 1 << 20 // bytes of console output before the run is ended as a flood
	consoleKeep   = 8 << 10 // the console's last bytes, quoted in an error
	maxStdin      = 16 << 20
	maxROFile     = 16 << 20
	guestOverhead = 256 << 20 // the guest kernel and init, over the jail's memory and the root
	vmmOverhead   = 384 << 20 // QEMU itself (with a 64 MiB translation cache under TCG)
)

// Options are the host's side of the VM tier.
type Options struct {
	Binary  string // the stockade binary the guest runs as its init; "" is this executable
	Kernel  string // the guest kernel; "" is $STOCKADE_VM_KERNEL, else CacheDir/vmlinuz
	Cache   string // where the initramfs is built; "" is $STOCKADE_VM_CACHE, else Host.CacheDir/vm
	QEMU    string // "" is qemu-system-x86_64 from PATH
	Notices io.Writer
	// BootAllowance is how long the guest has to come up and say hello;
	// AnswerAllowance how long, over the Spec's timeout, it has to answer
	// the plan. Zero is the defaults (longer under emulation).
	BootAllowance, AnswerAllowance time.Duration
	// MaxAnswer bounds one answer's frame from a session's guest (Boot):
	// the guest's body as JSON (base64, a third more) and its head. Zero
	// is 96 MiB; a server sets its own answer bound's frame.
	MaxAnswer int64

	fault    string        // tests: Plan.Fault
	onHello  func(pid int) // tests: called with the VMM's pid when the guest said hello
	cgroupID func(string)  // tests: told the VMM's cgroup name
	vmmTools []string      // tests: programs a fake VMM (a script) runs, exposed in its jail
	runDir   func(string)  // tests: told the run directory
}

// KVM reports whether /dev/kvm can be opened for use.
func KVM() error {
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return err
	}
	return f.Close()
}

// vmError is a failure of the VM tier, with its verdict.
type vmError struct {
	verdict jail.Verdict
	msg     string
}

func (e *vmError) Error() string { return e.msg }

func setupErr(format string, a ...any) error {
	return &jail.SetupError{Step: "vm", Err: fmt.Errorf(format, a...), ExitCode: jail.ExitJailError}
}

// Run runs spec (Isolation "vm") in a guest of its own: QEMU, confined on
// the host, boots the guest kernel with stockade as its init, and the
// guest's ordinary jail runs the payload. It returns the Result of the
// guest's jail, or one with a VM verdict and an error.
func Run(ctx context.Context, spec jail.Spec, st jail.Streams, o Options) (*jail.Result, error) {
	res, err := run(ctx, spec, st, o)
	if err != nil {
		r := jail.FailedResult(spec, err)
		var ve *vmError
		if errors.As(err, &ve) {
			r.Verdict = ve.verdict
		}
		return r, err
	}
	return res, nil
}

func run(ctx context.Context, spec jail.Spec, st jail.Streams, o Options) (*jail.Result, error) {
	if err := spec.Validate(); err != nil {
		return nil, setupErr("spec: %w", err)
	}
	t, err := tierFor(spec, o)
	if err != nil {
		return nil, err
	}
	plan, err := makePlan(spec, st, o)
	if err != nil {
		return nil, err
	}
	rep, err := t.boot(ctx, spec, plan, o)
	if err != nil {
		return nil, err
	}
	if rep.cancelled {
		return rep.Result, nil
	}
	return t.finish(spec, rep, st)
}

// tierFor is the tier a run of spec gets: KVM, or emulation where it is
// allowed (said on Notices), and the VMM, kernel and image resolved.
func tierFor(spec jail.Spec, o Options) (*tier, error) {
	emulate := spec.VMEmulate || os.Getenv(EmulateEnv) == "1"
	kvmErr := KVM()
	if kvmErr != nil && !emulate {
		return nil, setupErr(`isolation "vm": no KVM (%v): load kvm_intel or kvm_amd and let stockade open /dev/kvm (docs/isolation.md#enabling-kvm); or, for testing only, allow software emulation with --vm-emulate, vm_emulate = true or %s=1`, kvmErr, EmulateEnv)
	}
	if kvmErr != nil && o.Notices != nil {
		fmt.Fprintln(o.Notices, "stockade: isolation vm: no /dev/kvm, the guest runs under software emulation (TCG): slow, for testing only")
	}
	t, err := resolve(spec, o)
	if err != nil {
		return nil, err
	}
	t.kvm = kvmErr == nil
	return t, nil
}

// tier is what one run's VM is made of.
type tier struct {
	qemu, kernel string
	image        *Image
	vmmTools     []string // tests: Options.vmmTools
	initrdSize   int64
	rootfs       string // a --rootfs DIR's image, "" for none
	kvm          bool
}

func resolve(spec jail.Spec, o Options) (*tier, error) {
	t := &tier{qemu: o.QEMU, vmmTools: o.vmmTools}
	if t.qemu == "" {
		q, err := exec.LookPath("qemu-system-x86_64")
		if err != nil {
			return nil, setupErr(`isolation "vm": no qemu-system-x86_64 (apt-get install qemu-system-x86)`)
		}
		t.qemu = q
	}
	if err := t.images(spec, o); err != nil {
		return nil, err
	}
	return t, nil
}

// images resolves the guest kernel and builds (once) the guest's image
// and a --rootfs DIR's.
func (t *tier) images(spec jail.Spec, o Options) error {
	cache := cacheDir(spec, o)
	t.kernel = KernelPath(cache, o.Kernel)
	if _, err := os.Stat(t.kernel); err != nil {
		return setupErr(`isolation "vm": guest kernel: %v (set %s to a vmlinuz, such as Debian's from linux-image-amd64; vmtest/run --fetch-kernel fetches one)`, err, KernelEnv)
	}
	bin := o.Binary
	if bin == "" {
		var err error
		if bin, err = os.Executable(); err != nil {
			return setupErr("isolation vm: %w", err)
		}
	}
	img, err := EnsureImage(cache, bin, t.kernel)
	if err != nil {
		return setupErr(`isolation "vm": guest image: %w`, err)
	}
	fi, err := os.Stat(img.Initrd)
	if err != nil {
		return setupErr(`isolation "vm": guest image: %w`, err)
	}
	t.image, t.initrdSize = img, fi.Size()
	if spec.Rootfs != jail.RootfsHost {
		if t.rootfs, err = EnsureRootfsImage(cache, spec.Rootfs); err != nil {
			return setupErr(`isolation "vm": %w`, err)
		}
	}
	return nil
}

// BuildImages builds, where they are not built yet, the images a vm run
// of spec boots (the guest's, and for a --rootfs DIR its root's) and
// returns their files: what a first vm run would otherwise build
// (`stockade rootfs vm-image`).
func BuildImages(spec jail.Spec, o Options) ([]string, error) {
	t := &tier{}
	if err := t.images(spec, o); err != nil {
		return nil, err
	}
	files := []string{t.image.Initrd, t.image.Root}
	if t.rootfs != "" {
		files = append(files, t.rootfs)
	}
	return files, nil
}

// cacheDir is where the VM tier keeps its image (and, by default, kernel).
func cacheDir(spec jail.Spec, o Options) string {
	if o.Cache != "" {
		return o.Cache
	}
	if v := os.Getenv(CacheEnv); v != "" {
		return v
	}
	if spec.Host.CacheDir != "" {
		return filepath.Join(spec.Host.CacheDir, "vm")
	}
	if os.Geteuid() == 0 {
		return "/var/cache/stockade/vm"
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "stockade", "vm")
	}
	return filepath.Join(os.TempDir(), "stockade-vm-"+strconv.Itoa(os.Geteuid()))
}

// KernelPath is the guest kernel the tier boots: given, else
// $STOCKADE_VM_KERNEL, else vmlinuz in the cache directory.
func KernelPath(cache, given string) string {
	if given != "" {
		return given
	}
	if v := os.Getenv(KernelEnv); v != "" {
		return v
	}
	return filepath.Join(cache, "vmlinuz")
}

// makePlan reads what the guest cannot reach: stdin, the --workdir's
// files, the files bound read-only.
func makePlan(spec jail.Spec, st jail.Streams, o Options) (*Plan, error) {
	p := &Plan{Spec: spec, Fault: o.fault}
	p.Spec.Host = jail.Host{}
	if st.Stdin != nil {
		if fi, err := st.Stdin.Stat(); err == nil && fi.Mode()&os.ModeCharDevice == 0 {
			b, err := io.ReadAll(io.LimitReader(st.Stdin, maxStdin+1))
			if err != nil {
				return nil, setupErr("isolation vm: stdin: %w", err)
			}
			if len(b) > maxStdin {
				return nil, setupErr("isolation vm: stdin: more than %d bytes", maxStdin)
			}
			p.Stdin = b
		}
	}
	for i, b := range spec.ReadOnly {
		fi, err := os.Stat(b.Source)
		if err != nil {
			return nil, setupErr("isolation vm: ro %s: %w", b.Source, err)
		}
		if !fi.Mode().IsRegular() || fi.Size() > maxROFile {
			return nil, setupErr(`isolation "vm": ro %s: only regular files of at most %d bytes reach the guest for now, not directories`, b.Source, maxROFile)
		}
		data, err := os.ReadFile(b.Source)
		if err != nil {
			return nil, setupErr("isolation vm: ro %s: %w", b.Source, err)
		}
		if p.RO == nil {
			p.RO = map[int][]byte{}
		}
		p.RO[i] = data
	}
	if spec.Workdir != "" {
		files, err := readTree(spec.Workdir, spec.WorkSize)
		if err != nil {
			return nil, setupErr("isolation vm: --workdir %s: %w", spec.Workdir, err)
		}
		p.Work = files
	}
	return p, nil
}

func newID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// vmm is a VMM and what it holds on the host: its run directory (with
// the channel's socket), its cgroup (recorded in a run lock slot), its
// process (pid 1 of its own namespaces) and its console.
type vmm struct {
	cmd      *exec.Cmd // nil until started
	dir      string
	exited   chan struct{} // closed once cmd.Wait returned; waitErr is then set
	waitErr  error
	mgr      *cgroup.Manager
	grp      *cgroup.Group
	cgroupID string
	lock     *runlock.Lock
	confine  *vmmJail // QEMU's confinement; its uid is released at close
	con      *console
	conDone  chan struct{} // closed once the console is drained
}

func newVMM() vmm {
	return vmm{exited: make(chan struct{}), con: newConsole(), conDone: make(chan struct{})}
}

// start makes the run directory and the cgroup and starts the VMM for
// spec; what it made is close's to remove, also when it fails.
func (v *vmm) start(t *tier, spec jail.Spec, o Options) error {
	dir, err := os.MkdirTemp("", "stockade-vm-")
	if err != nil {
		return setupErr("isolation vm: run directory: %w", err)
	}
	v.dir = dir
	if o.runDir != nil {
		o.runDir(dir)
	}
	args, vcpus, ramMiB := t.qemuArgs(spec, filepath.Join(dir, "ctl"))
	args = append(args, netArgs(dir, spec)...)
	cmd := exec.Command(t.qemu, args...)
	// Its own namespaces: no network at all (not even the host's
	// loopback), its own pids (QEMU is their init: its death ends every
	// thread and child it has), mounts, IPC and host name. Pdeathsig: a
	// stockade killed mid-run takes its VMM with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNET | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS |
			syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS,
		Pdeathsig: syscall.SIGKILL,
		Setpgid:   true,
	}
	if !spec.Host.NoCgroup {
		if v.mgr, err = cgroup.NewManager(cgroup.Options{Parent: spec.Host.CgroupParent}); err != nil {
			return setupErr("isolation vm: cgroup: %w", err)
		}
		id := "vm-" + newID()
		// The cgroup is recorded in a run lock slot first, as the jail's
		// are: a stockade SIGKILLed mid-run (its VMM dies with it, by
		// Pdeathsig) leaves the group to the next run's sweep.
		if v.lock, err = runlock.Acquire(runlock.DefaultDir(), cleanStale, func(error) {}); err != nil {
			return setupErr("isolation vm: run lock: %w", err)
		}
		for _, d := range v.mgr.GroupDirs(id) {
			if err := v.lock.Record("cgroup", d); err != nil {
				return setupErr("isolation vm: run lock: %w", err)
			}
		}
		if v.grp, err = v.mgr.Create(id, cgroup.Limits{MemoryMax: ramMiB<<20 + vmmOverhead, CPUs: float64(vcpus), PidsMax: 256}); err != nil {
			return setupErr("isolation vm: cgroup: %w", err)
		}
		v.cgroupID = "stockade." + id
		if o.cgroupID != nil {
			o.cgroupID(v.cgroupID)
		}
		if fd, ok := v.grp.CgroupFD(); ok {
			cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
		}
	}
	if v.confine, err = t.confineVMM(cmd, dir); err != nil {
		return err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return setupErr("isolation vm: %w", err)
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	// The jail's start places the helper in the cgroup (v1) before QEMU runs.
	if err := v.confine.start(cmd, v.grp); err != nil {
		pr.Close()
		pw.Close()
		return err
	}
	pw.Close()
	v.cmd = cmd
	go func() { v.waitErr = cmd.Wait(); close(v.exited) }()
	go func() { v.con.drain(pr); pr.Close(); close(v.conDone) }()
	return nil
}

// kill sends the VMM SIGKILL (once started).
func (v *vmm) kill() {
	if v.cmd != nil {
		_ = v.cmd.Process.Signal(syscall.SIGKILL)
	}
}

// close kills the VMM and removes its cgroup and run directory; an error
// names what could not be removed (its run lock slot keeps the record
// for the next sweep).
func (v *vmm) close() error {
	var err error
	if v.cmd != nil {
		v.kill()
		<-v.exited
	}
	v.confine.release() // QEMU is dead (or never started): its uid is free
	leftover := false
	if v.grp != nil {
		_ = v.grp.Kill()
		if e := v.grp.Delete(); e != nil {
			leftover = true
			err = fmt.Errorf("isolation vm: cgroup %s: %w", v.cgroupID, e)
		}
	}
	if v.lock != nil {
		if leftover {
			v.lock.Abandon()
		} else {
			_ = v.lock.Release()
		}
	}
	if v.mgr != nil {
		v.mgr.Close()
	}
	if v.dir != "" {
		if e := os.RemoveAll(v.dir); e != nil && err == nil {
			err = e
		}
	}
	return err
}

// allowances are how long a guest may take to come up and, past a run's
// timeout, to answer: o's, or the defaults for KVM or emulation (about
// ten times slower here).
func (t *tier) allowances(o Options) (boot, answer time.Duration) {
	boot, answer = o.BootAllowance, o.AnswerAllowance
	if boot == 0 {
		boot = 20 * time.Second
		if !t.kvm {
			boot = 180 * time.Second
		}
	}
	if answer == 0 {
		answer = 15 * time.Second
		if !t.kvm {
			answer = 120 * time.Second
		}
	}
	return boot, answer
}

// boot runs the VMM, sends the guest the plan and returns its reply (a
// cancelled run's is a Result of its own); everything it makes on the
// host (the run directory with the channel's socket, the cgroup, QEMU's
// process and namespaces) is gone when it returns.
func (t *tier) boot(ctx context.Context, spec jail.Spec, plan *Plan, o Options) (*Reply, error) {
	boot, answer := t.allowances(o)
	v := newVMM()
	defer v.close()
	if err := v.start(t, spec, o); err != nil {
		return nil, err
	}
	sock := filepath.Join(v.dir, "ctl")
	exited, con, conDone := v.exited, v.con, v.conDone
	kill := func() {
		v.kill()
		<-exited
	}
	hn, err := startHostNet(v.dir, spec, exited)
	if err != nil {
		return nil, err
	}
	defer hn.close()

	type answerT struct {
		reply *Reply
		err   error
	}
	answered := make(chan answerT, 1)
	helloed := make(chan struct{})
	go func() {
		r, err := t.talk(sock, plan, helloed, exited, o, v.cmd.Process.Pid, spec)
		answered <- answerT{r, err}
	}()

	bootTimer := time.NewTimer(boot)
	defer bootTimer.Stop()
	var answerTimer <-chan time.Time
	for {
		select {
		case <-helloed:
			helloed = nil
			bootTimer.Stop()
			answerTimer = time.After(spec.Timeout + answer)
			continue
		case a := <-answered:
			if a.err != nil {
				// The channel ended: the VMM's end tells why.
				select {
				case <-exited:
				case <-time.After(2 * time.Second):
				}
				<-conDone
				return nil, t.failure(con, exited, v.waitErr, a.err)
			}
			// The guest powers itself off; give it a moment, then kill.
			select {
			case <-exited:
			case <-time.After(5 * time.Second):
			}
			return hn.reply(a.reply), nil
		case <-con.flood:
			kill()
			return nil, &vmError{VerdictConsole, fmt.Sprintf("isolation vm: the guest wrote more than %d bytes to its console; the VMM was killed", consoleLimit)}
		case <-exited:
			// Let the reader take what was sent before the end.
			select {
			case a := <-answered:
				if a.err == nil {
					return hn.reply(a.reply), nil
				}
			case <-time.After(2 * time.Second):
			}
			<-conDone
			return nil, t.failure(con, exited, v.waitErr, errors.New("the VMM exited"))
		case <-bootTimer.C:
			kill()
			return nil, &vmError{VerdictNoAnswer, fmt.Sprintf("isolation vm: the guest did not come up within %v; the VMM was killed%s", boot, con.quote())}
		case <-answerTimer:
			kill()
			return nil, &vmError{VerdictNoAnswer, fmt.Sprintf("isolation vm: the guest did not answer within the timeout %v and %v; the VMM was killed%s", spec.Timeout, answer, con.quote())}
		case <-ctx.Done():
			kill()
			r := jail.FailedResult(spec, context.Cause(ctx))
			r.Verdict, r.ExitCode = jail.VerdictCancelled, jail.ExitCancelled
			var cs jail.CancelSignal
			if errors.As(context.Cause(ctx), &cs) {
				r.ExitCode = jail.ExitSignalOffset + int(cs.Signal)
			}
			return &Reply{Result: r, cancelled: true}, nil
		}
	}
}

// ramMiB is the guest's RAM for spec, in MiB: the jail's memory, the
// initramfs (its packed and unpacked copies, while the kernel unpacks
// it), the kernel and init. The root is a disk: what the guest reads of
// it is page cache, which the kernel can drop.
func (t *tier) ramMiB(spec jail.Spec) int64 {
	return (spec.Cgroup.MemoryMax + 2*t.initrdSize + guestOverhead + 1<<20 - 1) >> 20
}

// qemuArgs is the VMM's command line for spec, its control channel the
// unix socket sock, with the guest's vCPUs and RAM (MiB) it sets.
func (t *tier) qemuArgs(spec jail.Spec, sock string) (args []string, vcpus int, ramMiB int64) {
	vcpus = int(math.Ceil(spec.Cgroup.CPUs))
	vcpus = max(1, min(vcpus, runtime.NumCPU()))
	ramMiB = t.ramMiB(spec)
	args = []string{
		"-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
		"-machine", "q35", "-m", strconv.FormatInt(ramMiB, 10), "-smp", strconv.Itoa(vcpus),
		"-kernel", t.kernel, "-initrd", t.image.Initrd,
		"-append", "console=ttyS0 rdinit=" + guestInit + " panic=-1 quiet loglevel=1 -- " + GuestArg,
		// The root: read-only to the guest, whose writes QEMU refuses.
		"-drive", "file=" + strings.ReplaceAll(t.image.Root, ",", ",,") + ",format=raw,if=none,readonly=on,id=root",
		"-device", "virtio-blk-pci,drive=root",
		"-chardev", "stdio,id=con,signal=off", "-serial", "chardev:con",
		"-chardev", "socket,id=ctl,path=" + sock + ",server=on,wait=off", "-serial", "chardev:ctl",
		"-nic", "none",
		"-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
	}
	if t.rootfs != "" {
		// A --rootfs DIR's image: the guest's second disk (vdb, after the
		// root's vda), its jail's root.
		// The image is root's alone (it holds DIR's every file, whatever
		// their modes): QEMU gets it as a descriptor its jail's helper
		// opened as root (vmmOpened, "@fd0@").
		args = append(args, "-add-fd", "fd=@fd0@,set=1",
			"-drive", "file=/dev/fdset/1,format=raw,if=none,readonly=on,id=rootfs",
			"-device", "virtio-blk-pci,drive=rootfs")
	}
	if t.kvm {
		args = append(args, "-accel", "kvm", "-cpu", "host")
	} else {
		args = append(args, "-accel", "tcg,tb-size=64", "-cpu", "max")
	}
	return args, vcpus, ramMiB
}

// cleanStale removes the cgroups a dead stockade's slot records; a slot
// that records more (a jail's run directory) is left to the jail's own
// sweep, which removes both, at the next jail run.
func cleanStale(s runlock.Stale) error {
	var groups []string
	for _, e := range s.Entries {
		if e.Kind != "cgroup" {
			return fmt.Errorf("slot %d: %s %s is the jail's sweep's to remove", s.Slot, e.Kind, e.Path)
		}
		groups = append(groups, e.Path)
	}
	_, err := cgroup.RemoveStale(groups)
	return err
}

// failure names how the guest ended without answering.
func (t *tier) failure(con *console, exited <-chan struct{}, waitErr error, cause error) error {
	select {
	case <-exited:
	default:
		return &vmError{VerdictDied, fmt.Sprintf("isolation vm: the channel to the guest failed (%v)%s", cause, con.quote())}
	}
	if con.panicked() {
		return &vmError{VerdictPanic, "isolation vm: the guest kernel panicked" + con.quote()}
	}
	how := "exited"
	var ee *exec.ExitError
	if errors.As(waitErr, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			how = "was killed by " + unix.SignalName(ws.Signal())
		} else {
			how = "exited with status " + strconv.Itoa(ee.ExitCode())
		}
	}
	return &vmError{VerdictDied, fmt.Sprintf("isolation vm: the VMM %s before the guest answered (%v)%s", how, cause, con.quote())}
}

// talk connects to the guest's channel, waits for its hello, sends the
// plan and reads the reply.
func (t *tier) talk(sock string, plan *Plan, helloed chan<- struct{}, exited <-chan struct{}, o Options, pid int, spec jail.Spec) (*Reply, error) {
	var c net.Conn
	for {
		var err error
		if c, err = net.Dial("unix", sock); err == nil {
			break
		}
		select {
		case <-exited:
			return nil, fmt.Errorf("connect: %w", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	go func() { <-exited; c.Close() }()
	defer c.Close()
	r := bufio.NewReaderSize(c, 64<<10)
	if _, err := readFrame(r, 4<<10, 64<<10); err != nil {
		return nil, fmt.Errorf("hello: %w", err)
	}
	close(helloed)
	if o.onHello != nil {
		o.onHello(pid)
	}
	if err := writeFrame(c, plan, json.Marshal); err != nil {
		return nil, fmt.Errorf("send the plan: %w", err)
	}
	// The reply's bound: both streams (JSON may escape a byte as six),
	// /work's files (base64), and room for the rest.
	limit := 12*spec.OutputLimit + 2*spec.WorkSize + 16<<20
	if plan.Selftest != nil {
		limit = maxSelftestReply
	}
	b, err := readFrame(r, limit, 0)
	if err != nil {
		return nil, fmt.Errorf("read the reply: %w", err)
	}
	var rep Reply
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, fmt.Errorf("decode the reply: %w", err)
	}
	return &rep, nil
}

// finish hands the guest's Result on: its output to the streams, /work's
// files into the --workdir.
func (t *tier) finish(spec jail.Spec, rep *Reply, st jail.Streams) (*jail.Result, error) {
	if rep.Result == nil {
		return nil, setupErr("isolation vm: the guest could not run the plan: %s", rep.Error)
	}
	res := rep.Result
	HoldResult(spec, res)
	if st.Stdout != nil {
		io.WriteString(st.Stdout, res.Stdout)
	}
	if st.Stderr != nil {
		io.WriteString(st.Stderr, res.Stderr)
	}
	if rep.Error != "" {
		res.Degraded = append(res.Degraded, rep.Error)
	}
	if spec.Workdir != "" && rep.Error == "" {
		// What the guest made belongs to the directory's owner, as the
		// jail tier's copy-back makes it.
		uid, gid := -1, -1
		var own unix.Stat_t
		if unix.Stat(spec.Workdir, &own) == nil {
			uid, gid = int(own.Uid), int(own.Gid)
		}
		if err := writeTree(spec.Workdir, rep.Work, uid, gid); err != nil {
			res.Degraded = append(res.Degraded, "isolation vm: copy /work back: "+err.Error())
		}
	}
	return res, nil
}

// runVerdicts are the verdicts a guest's jail can end a run with; the
// VM tier's own (vm_panic, ...) are the host's alone to give.
var runVerdicts = map[jail.Verdict]bool{jail.VerdictError: true, jail.VerdictCancelled: true, jail.VerdictMemory: true,
	jail.VerdictPids: true, jail.VerdictDisk: true, jail.VerdictCPU: true, jail.VerdictTimeout: true, jail.VerdictSeccomp: true,
	jail.VerdictSignal: true, jail.VerdictOutput: true, jail.VerdictExit: true, jail.VerdictOK: true}

// HoldResult holds the guest's Result to what a jail's can be: each
// stream within the output limit (cut and said, as the jail cuts it), and
// a verdict of the jail's; another (one of the VM tier's, which the host
// alone observes, or one no run has) is an error that says what the
// guest claimed.
func HoldResult(spec jail.Spec, res *jail.Result) {
	if int64(len(res.Stdout)) > spec.OutputLimit {
		res.Stdout, res.StdoutTruncated = strings.ToValidUTF8(res.Stdout[:spec.OutputLimit], ""), true
	}
	if int64(len(res.Stderr)) > spec.OutputLimit {
		res.Stderr, res.StderrTruncated = strings.ToValidUTF8(res.Stderr[:spec.OutputLimit], ""), true
	}
	if (res.StdoutTruncated || res.StderrTruncated) && res.Verdict == jail.VerdictOK {
		res.Verdict = jail.VerdictOutput
	}
	if !runVerdicts[res.Verdict] {
		msg := fmt.Sprintf("isolation vm: the guest answered verdict %q, which no jail gives", bound(string(res.Verdict), 40))
		res.Verdict, res.Error = jail.VerdictError, &msg
	}
}

// console keeps the guest console's last bytes and counts them all.
type console struct {
	mu    sync.Mutex
	tail  []byte
	total int64
	flood chan struct{}
	seen  bool // "Kernel panic" went past
}

func newConsole() *console { return &console{flood: make(chan struct{})} }

func (c *console) drain(r io.Reader) {
	buf := make([]byte, 32<<10)
	flooded := false
	for {
		n, err := r.Read(buf)
		if n > 0 {
			c.mu.Lock()
			c.total += int64(n)
			c.tail = append(c.tail, buf[:n]...)
			if strings.Contains(string(c.tail), "Kernel panic") {
				c.seen = true
			}
			if len(c.tail) > consoleKeep {
				c.tail = append(c.tail[:0], c.tail[len(c.tail)-consoleKeep:]...)
			}
			over := c.total > consoleLimit
			c.mu.Unlock()
			if over && !flooded {
				flooded = true
				close(c.flood)
			}
		}
		if err != nil {
			return
		}
	}
}

func (c *console) panicked() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seen
}

// quote is the console's last lines, for an error.
func (c *console) quote() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := strings.TrimSpace(strings.ToValidUTF8(string(c.tail), "?"))
	if s == "" {
		return ""
	}
	lines := strings.Split(s, "\n")
	if len(lines) > 12 {
		lines = lines[len(lines)-12:]
	}
	return "; the console's last lines:\n" + strings.Join(lines, "\n")
}
