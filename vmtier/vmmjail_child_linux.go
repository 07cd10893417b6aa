package vmtier

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// init is the VMM jail's re-exec hook (as package jail's is for its init):
// the host starts this binary again as vmmJailArg0, pid 1 of QEMU's new
// namespaces, and it must confine and exec QEMU before any main runs.
func init() {
	if len(os.Args) == 2 && os.Args[0] == vmmJailArg0 && os.Getpid() == 1 {
		vmmJailMain()
	}
}

// The helper's descriptors (confineVMM's ExtraFiles).
const (
	vmmStatusFD   = 3 // write: the failing step's words; closed by the exec
	vmmLifelineFD = 4 // read: the host's go byte; hung up if the host died
)

// vmmJailMain confines QEMU as its plan says and execs it; on any failure
// it writes the step and reason to the status descriptor and exits.
func vmmJailMain() {
	// Thread-scoped state (the bounding set, no_new_privs, the parent
	// death signal) must be set on the thread that execs.
	runtime.LockOSThread()
	status := os.NewFile(vmmStatusFD, "status")
	fail := func(err error) {
		fmt.Fprint(status, err.Error())
		os.Exit(125)
	}
	var p vmmJailPlan
	if err := json.Unmarshal([]byte(os.Args[1]), &p); err != nil {
		fail(fmt.Errorf("plan: %w", err))
	}
	if err := containVMM(&p); err != nil {
		fail(err)
	}
	// Go opened every other descriptor close-on-exec; these two close at
	// the exec, which the host reads as success.
	unix.CloseOnExec(vmmStatusFD)
	unix.CloseOnExec(vmmLifelineFD)
	err := unix.Exec(p.Argv[0], p.Argv, []string{})
	fail(fmt.Errorf("exec %s: %w", p.Argv[0], err))
}

// containVMM is the helper's sequence, in the order the kernel needs it:
// mounts while root, the pivot while the old root is still reachable, the
// drop last (after it no mount is possible), then the checks.
func containVMM(p *vmmJailPlan) error {
	steps := []struct {
		name string
		do   func(*vmmJailPlan) error
	}{
		{"wait for the host", waitHost},
		{"private mounts", privateMounts},
		{"root", mountVMMRoot},
		{"files", bindVMMFiles},
		{"devices", bindVMMDevices},
		{"run directory", bindVMMRunDir},
		{"pivot_root", pivotVMMRoot},
		{"open", openVMMFiles},
		{"drop privileges", dropVMMPrivileges},
		{"parent death", rearmParentDeath},
		{"verify", verifyVMMConfined},
	}
	for _, s := range steps {
		if err := s.do(p); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	return nil
}

// waitHost waits for the host's go byte: on cgroup v1 the host places
// this process in the VMM's cgroup first.
func waitHost(*vmmJailPlan) error {
	var b [1]byte
	n, err := unix.Read(vmmLifelineFD, b[:])
	if n != 1 {
		return fmt.Errorf("the host did not say go (%v)", err)
	}
	return nil
}

// privateMounts keeps every mount below from propagating to the host's
// namespace: they die with QEMU's.
func privateMounts(*vmmJailPlan) error {
	if err := unix.Mount("", "/", "", unix.MS_SLAVE|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("make / a slave: %w", err)
	}
	return nil
}

// mountVMMRoot mounts the new root, a small tmpfs, on p.Root.
func mountVMMRoot(p *vmmJailPlan) error {
	if err := unix.Mount("tmpfs", p.Root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=1m,nr_inodes=4096,mode=0755"); err != nil {
		return fmt.Errorf("tmpfs on %s: %w", p.Root, err)
	}
	return nil
}

// bindVMMFiles binds each file read-only (and nosuid, nodev) at its own
// path under the root.
func bindVMMFiles(p *vmmJailPlan) error {
	for _, f := range p.ReadOnly {
		fi, err := os.Stat(f)
		if err != nil {
			return err
		}
		if err := bindAt(p.Root, f, fi.IsDir(), unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV); err != nil {
			return err
		}
	}
	return nil
}

// bindVMMDevices binds the device nodes: read-only mounts (a device's
// writes are not the mount's), nosuid and noexec, but not nodev.
func bindVMMDevices(p *vmmJailPlan) error {
	for _, d := range p.Devices {
		if err := bindAt(p.Root, d, false, unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NOEXEC); err != nil {
			return err
		}
	}
	return nil
}

// bindVMMRunDir binds the run directory, QEMU's one writable place.
func bindVMMRunDir(p *vmmJailPlan) error {
	return bindAt(p.Root, p.RunDir, true, unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC)
}

// bindAt binds the host's src at the same path under root, then sets
// flags on the bind (a bind ignores them at creation; the remount applies
// them to this mount only).
func bindAt(root, src string, dir bool, flags uintptr) error {
	dst := filepath.Join(root, src)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("%s: %w", dst, err)
	}
	if dir {
		if err := os.Mkdir(dst, 0o755); err != nil {
			return fmt.Errorf("%s: %w", dst, err)
		}
	} else if err := os.WriteFile(dst, nil, 0o444); err != nil {
		return fmt.Errorf("%s: %w", dst, err)
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s: %w", src, err)
	}
	if err := unix.Mount("", dst, "", unix.MS_REMOUNT|unix.MS_BIND|flags, ""); err != nil {
		return fmt.Errorf("remount %s: %w", src, err)
	}
	return nil
}

// pivotVMMRoot makes the tmpfs the root and detaches the host's (the
// put_old of pivot_root(".", ".") is the old root, stacked under the new,
// and unmounted at once), then makes the tmpfs itself read-only.
func pivotVMMRoot(p *vmmJailPlan) error {
	if err := unix.Chdir(p.Root); err != nil {
		return fmt.Errorf("chdir %s: %w", p.Root, err)
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root %s: %w", p.Root, err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the host's root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("chdir /: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("remount / read-only: %w", err)
	}
	return nil
}

// openVMMFiles opens, as root, the files QEMU gets as descriptors (left
// open across the exec) and puts their numbers in QEMU's arguments.
func openVMMFiles(p *vmmJailPlan) error {
	for i, f := range p.Open {
		//stockade:no-cloexec QEMU, the exec to come, takes it (-add-fd); the helper starts nothing else
		fd, err := unix.Open(f, unix.O_RDONLY|unix.O_NOFOLLOW, 0)
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		mark := fmt.Sprintf("@fd%d@", i)
		for j, a := range p.Argv {
			p.Argv[j] = strings.ReplaceAll(a, mark, strconv.Itoa(fd))
		}
	}
	return nil
}

// dropVMMPrivileges empties the bounding set (while CAP_SETPCAP is still
// held), takes the run's groups, gid and uid (setresuid from root to a
// non-zero uid clears the permitted and effective sets, on every thread:
// Go's setresuid is all-thread), clears the ambient and inheritable sets
// and sets no_new_privs, so nothing QEMU execs gains a privilege.
func dropVMMPrivileges(p *vmmJailPlan) error {
	if p.UID == 0 || p.GID == 0 {
		return errors.New("uid or gid 0")
	}
	for c := 0; c <= unix.CAP_LAST_CAP; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("bounding set: cap %d: %w", c, err)
		}
	}
	if p.Groups == nil {
		p.Groups = []int{}
	}
	if err := syscall.Setgroups(p.Groups); err != nil {
		return fmt.Errorf("setgroups %v: %w", p.Groups, err)
	}
	if err := syscall.Setresgid(p.GID, p.GID, p.GID); err != nil {
		return fmt.Errorf("setresgid %d: %w", p.GID, err)
	}
	if err := syscall.Setresuid(p.UID, p.UID, p.UID); err != nil {
		return fmt.Errorf("setresuid %d: %w", p.UID, err)
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var none [2]unix.CapUserData
	if err := unix.Capset(&hdr, &none[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	return nil
}

// rearmParentDeath sets the parent death signal again (a change of
// credentials clears it), then checks the host is still there: its
// lifeline hangs up when it dies, and a host that died before the re-arm
// would otherwise leave QEMU running.
func rearmParentDeath(*vmmJailPlan) error {
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return fmt.Errorf("pdeathsig: %w", err)
	}
	fds := []unix.PollFd{{Fd: vmmLifelineFD, Events: unix.POLLIN}}
	if _, err := unix.Poll(fds, 0); err != nil {
		return fmt.Errorf("poll the lifeline: %w", err)
	}
	if fds[0].Revents&unix.POLLHUP != 0 {
		return errors.New("the host is gone")
	}
	return nil
}

// verifyVMMConfined reads every drop back and fails closed.
func verifyVMMConfined(p *vmmJailPlan) error {
	if r, e, s := syscall.Getuid(), syscall.Geteuid(), p.UID; r != s || e != s {
		return fmt.Errorf("uid %d/%d, want %d", r, e, s)
	}
	if r, e := syscall.Getgid(), syscall.Getegid(); r != p.GID || e != p.GID {
		return fmt.Errorf("gid %d/%d, want %d", r, e, p.GID)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var d [2]unix.CapUserData
	if err := unix.Capget(&hdr, &d[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	for _, x := range d {
		if x.Effective|x.Permitted|x.Inheritable != 0 {
			return fmt.Errorf("capabilities left: %+v", d)
		}
	}
	if v, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0); err != nil || v != 1 {
		return fmt.Errorf("no_new_privs %d (%v)", v, err)
	}
	if _, err := os.Stat("/etc/passwd"); !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("the host's /etc is visible (%v)", err)
	}
	return nil
}
