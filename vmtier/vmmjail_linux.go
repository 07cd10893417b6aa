package vmtier

import (
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/stockade/stockade/cgroup"
	"github.com/stockade/stockade/internal/runlock"
	"github.com/stockade/stockade/jail"
)

// The VMM's jail on the host, as Firecracker's jailer does for its VMM:
// QEMU starts in a root of its own holding only the files it needs, read
// only, and the run directory whose sockets it serves; as an unprivileged
// host uid of its own, with no capabilities and no_new_privs. The host
// side (here) chooses the uid and the files; the helper (vmmjail_child_
// linux.go: this binary again, as pid 1 of QEMU's new namespaces) builds
// the root, drops to the uid and execs QEMU. Every step fails closed: a
// failure is the run's setup error naming the step and path; QEMU never
// starts less confined.
//
// Why a helper and no user namespace: the helper is host root inside new
// mount and pid namespaces, so it can bind, remount read-only and
// pivot_root with none of a user namespace's locked-mount rules, then
// setresuid to the run's uid before exec; a user namespace would add a
// second mapping to check and gain nothing QEMU keeps (its uid is an
// unprivileged host uid either way, and it holds no capability in any
// namespace). SysProcAttr.Credential alone cannot do it: the binds must be
// made between clone and exec, as root.

// vmmJailArg0 is the helper's argv[0]; with pid 1 of a new pid namespace
// no user's command line can have it.
const vmmJailArg0 = "stockade-vmm-jail"

// vmmStartAllowance bounds how long the helper may take to build the root
// and exec QEMU.
const vmmStartAllowance = 30 * time.Second

// vmmJailPlan is what the helper is told (as JSON, its argv[1]).
type vmmJailPlan struct {
	Root     string   // an empty host directory the new root is mounted on
	ReadOnly []string // host files (or directories), each bound read-only at its own path
	Devices  []string // device nodes, bound at their own paths
	RunDir   string   // the run directory (its sockets), bound writable at its own path
	UID, GID int      // QEMU's host uid and gid
	Groups   []int    // supplementary groups (/dev/kvm's group where KVM is used)
	Argv     []string // QEMU's path and arguments
	// Open are files (bound in ReadOnly too) the helper opens read-only
	// while still root, for QEMU to have as descriptors: the number of
	// Open[i]'s stands in Argv for "@fd<i>@". A file only root may read
	// (a --rootfs DIR's image, which holds DIR's every file whatever its
	// mode) reaches QEMU's uid this way and no other uid at all.
	Open []string
}

// vmmJail is one VMM's confinement, held by the host for the VMM's life.
type vmmJail struct {
	id       *runlock.ID // the run's host-wide number, whose uid QEMU is
	uid      int
	status   *os.File // read: the helper's error, or EOF at exec
	lifeline *os.File // write: one byte lets the helper go; closed at exec
}

// vmmExposed is the one list of the run's files the VMM sees, besides
// QEMU itself (qemuFiles): the guest kernel and its initramfs.
func (t *tier) vmmExposed() []string {
	files := []string{t.kernel, t.image.Initrd, t.image.Root}
	if t.rootfs != "" {
		files = append(files, t.rootfs)
	}
	return files
}

// vmmOpened is what QEMU gets as descriptors the helper opened (see
// vmmJailPlan.Open; qemuArgs names them "@fd<i>@"): a --rootfs DIR's image.
func (t *tier) vmmOpened() []string {
	if t.rootfs == "" {
		return nil
	}
	return []string{t.rootfs}
}

// confineVMM turns cmd (QEMU, with its SysProcAttr's namespaces already
// set) into the helper that confines it, exposing the tier's files and the
// run directory dir. It takes the run's host-wide number, whose uid QEMU
// becomes (jail.HostIDFor: the jail's range, one per live run, so a jail
// and a VMM never share one); release gives it back once QEMU is dead.
func (t *tier) confineVMM(cmd *exec.Cmd, dir string) (*vmmJail, error) {
	if os.Geteuid() != 0 {
		return nil, setupErr(`isolation "vm": confine the VMM: stockade must run as root to jail QEMU (uid %d)`, os.Geteuid())
	}
	files, err := qemuFiles(t.qemu, t.vmmTools...)
	if err != nil {
		return nil, setupErr(`isolation "vm": confine the VMM: %w`, err)
	}
	files = append(files, t.vmmExposed()...)
	devices := []string{"/dev/null", "/dev/urandom"}
	var groups []int
	if t.kvm {
		devices = append(devices, "/dev/kvm")
		fi, err := os.Stat("/dev/kvm")
		if err != nil {
			return nil, setupErr(`isolation "vm": confine the VMM: %w`, err)
		}
		groups = append(groups, int(fi.Sys().(*syscall.Stat_t).Gid))
	}
	id, err := runlock.AcquireID(runlock.IDsDir(), 0)
	if err != nil {
		return nil, setupErr(`isolation "vm": confine the VMM: %w`, err)
	}
	j := &vmmJail{id: id, uid: jail.HostIDFor(id.N())}
	root := filepath.Join(dir, "root")
	if err := os.Mkdir(root, 0o700); err != nil {
		j.release()
		return nil, setupErr(`isolation "vm": confine the VMM: root %s: %w`, root, err)
	}
	// QEMU creates its sockets in the run directory: its own, and
	// nothing else on the host is.
	if err := os.Chown(dir, j.uid, j.uid); err != nil {
		j.release()
		return nil, setupErr(`isolation "vm": confine the VMM: chown %s: %w`, dir, err)
	}
	plan, err := json.Marshal(vmmJailPlan{Root: root, ReadOnly: files, Devices: devices, RunDir: dir,
		UID: j.uid, GID: j.uid, Groups: groups, Argv: append([]string{cmd.Path}, cmd.Args[1:]...), Open: t.vmmOpened()})
	if err != nil {
		j.release()
		return nil, setupErr(`isolation "vm": confine the VMM: %w`, err)
	}
	statusR, statusW, err := os.Pipe()
	if err != nil {
		j.release()
		return nil, setupErr(`isolation "vm": confine the VMM: %w`, err)
	}
	lifeR, lifeW, err := os.Pipe()
	if err != nil {
		statusR.Close()
		statusW.Close()
		j.release()
		return nil, setupErr(`isolation "vm": confine the VMM: %w`, err)
	}
	j.status, j.lifeline = statusR, lifeW
	cmd.Path = "/proc/self/exe"
	cmd.Args = []string{vmmJailArg0, string(plan)}
	cmd.Env = []string{}
	cmd.ExtraFiles = []*os.File{statusW, lifeR} // fds 3 and 4
	return j, nil
}

// start starts the helper, places it in grp where the kernel could not at
// clone (cgroup v1), lets it go and waits until it exec'd QEMU or failed:
// then a setup error with the helper's words (step and path), and the
// helper is gone.
func (j *vmmJail) start(cmd *exec.Cmd, grp *cgroup.Group) error {
	err := cmd.Start()
	for _, f := range cmd.ExtraFiles {
		f.Close()
	}
	if err != nil {
		j.status.Close()
		j.lifeline.Close()
		return setupErr(`isolation "vm": start the VMM's jail: %w`, err)
	}
	fail := func(err error) error {
		j.lifeline.Close()
		j.status.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return err
	}
	if grp != nil && !cmd.SysProcAttr.UseCgroupFD {
		// cgroup v1: no CLONE_INTO_CGROUP; placed before QEMU runs.
		if err := grp.AddProc(cmd.Process.Pid); err != nil {
			return fail(setupErr("isolation vm: cgroup: %w", err))
		}
	}
	if _, err := j.lifeline.Write([]byte{1}); err != nil {
		return fail(setupErr(`isolation "vm": confine the VMM: %w`, err))
	}
	_ = j.status.SetReadDeadline(time.Now().Add(vmmStartAllowance))
	msg, err := io.ReadAll(io.LimitReader(j.status, 4<<10))
	if len(msg) > 0 {
		return fail(setupErr(`isolation "vm": confine the VMM: %s`, msg))
	}
	if err != nil {
		return fail(setupErr(`isolation "vm": confine the VMM: the helper did not exec QEMU: %w`, err))
	}
	j.status.Close()
	j.lifeline.Close()
	return nil
}

// release gives the run's number (and with it QEMU's uid) back; only once
// QEMU is dead.
func (j *vmmJail) release() {
	if j != nil && j.id != nil {
		j.id.Release()
		j.id = nil
	}
}

// firmware is what QEMU reads for -machine q35 -nodefaults with -kernel:
// SeaBIOS, the option ROM that boots the kernel, and the vapic ROM. Each
// is looked for where Debian's QEMU looks (its data directories).
var firmware = []string{"bios-256k.bin", "linuxboot_dma.bin", "kvmvapic.bin"}

var firmwareDirs = []string{"/usr/share/qemu", "/usr/share/seabios"}

// qemuFiles is QEMU's binary, its interpreter and shared libraries (the
// ELF closure, modules included), and its firmware: each a path as QEMU
// opens it. tools are more programs with their closures (tests: what a
// fake VMM, a script, runs).
func qemuFiles(qemu string, tools ...string) ([]string, error) {
	files := []string{}
	seen := map[string]bool{}
	var walk func(string) error
	walk = func(path string) error {
		if seen[path] {
			return nil
		}
		seen[path] = true
		files = append(files, path)
		if fi, err := os.Stat(path); err == nil && fi.IsDir() {
			return nil // a tool's data (tests: a fake VMM's Python library)
		}
		interp, magic := scriptInterpreter(path)
		if interp != "" {
			return walk(interp)
		}
		if magic != "\x7fELF" {
			return nil // data (tests: a fake VMM's answer)
		}
		deps, err := elfDeps(path)
		if err != nil {
			return err
		}
		for _, d := range deps {
			if err := walk(d); err != nil {
				return err
			}
		}
		return nil
	}
	for _, p := range append([]string{qemu}, tools...) {
		if err := walk(p); err != nil {
			return nil, err
		}
	}
	// Debian's QEMU loads its TCG accelerator as a module, from
	// <bindir>/../lib/<triplet>/qemu.
	mods, _ := filepath.Glob(filepath.Join(filepath.Dir(qemu), "..", "lib", "*", "qemu", "accel-tcg-*.so"))
	for _, m := range mods {
		if err := walk(filepath.Clean(m)); err != nil {
			return nil, err
		}
	}
	for _, name := range firmware {
		found := false
		for _, d := range firmwareDirs {
			p := filepath.Join(d, name)
			if _, err := os.Stat(p); err == nil {
				files = append(files, p)
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("firmware %s: in none of %v (apt-get install qemu-system-x86)", name, firmwareDirs)
		}
	}
	return files, nil
}

// libDirs is where the dynamic loader looks without its cache, in order.
var libDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"}

// elfDeps is what the loader opens for the ELF file path: its interpreter
// and its DT_NEEDED libraries, each where libDirs finds it.
func elfDeps(path string) ([]string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	var deps []string
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b, err := io.ReadAll(p.Open())
			if err != nil {
				return nil, fmt.Errorf("%s: interpreter: %w", path, err)
			}
			if n := len(b); n > 0 && b[n-1] == 0 {
				b = b[:n-1]
			}
			deps = append(deps, string(b))
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for _, l := range libs {
		found := ""
		for _, d := range libDirs {
			if p := filepath.Join(d, l); fileExists(p) {
				found = p
				break
			}
		}
		if found == "" {
			return nil, fmt.Errorf("%s: library %s: in none of %v", path, l, libDirs)
		}
		deps = append(deps, found)
	}
	return deps, nil
}

// scriptInterpreter is the interpreter a "#!" script names ("" if none),
// and the file's first four bytes.
func scriptInterpreter(path string) (interp, magic string) {
	f, err := os.Open(path)
	if err != nil {
		return "", ""
	}
	defer f.Close()
	b := make([]byte, 256)
	n, _ := io.ReadFull(f, b)
	magic = string(b[:min(n, 4)])
	line, _, _ := strings.Cut(string(b[:n]), "\n")
	rest, ok := strings.CutPrefix(line, "#!")
	if fields := strings.Fields(rest); ok && len(fields) > 0 {
		return fields[0], magic
	}
	return "", magic
}

func fileExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}
