package vmtier

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/stockade/stockade/jail"
	"golang.org/x/sys/unix"
)

// GuestArg is the argument the guest kernel passes its init (stockade,
// from the initramfs) after "--" on its command line: main hands such a
// process, when it is PID 1, to GuestMain.
const GuestArg = "__vmguest"

// The guest's paths.
const (
	guestChannel = "/dev/ttyS1"
	guestDir     = "/srv/stockade-vm"
	guestWork    = guestDir + "/work"
	// guestCgroup is where the guest's jails go: a child of the guest's
	// cgroup v2 root with every controller, as a Delegate=yes unit has.
	guestCgroup = "/jail"
	// guestWorkOwner owns the guest's copy of a --workdir.
	guestWorkOwner = 1000
)

// The initramfs's paths and the guest's root disk.
const (
	guestInit    = "/usr/local/bin/stockade" // the initramfs's init, and the root's copy of it
	guestModules = "/usr/lib/stockade/modules"
	modulesLoad  = "load" // in guestModules: the modules' file names, in the order init loads them
	guestDisk    = "/dev/vda"
	// A --rootfs DIR's image, when the host attached one, and where the
	// guest mounts it: its jail's root.
	guestRootfsDisk = "/dev/vdb"
	guestRootfs     = GuestRootfs
	// guestRootEnv marks init's second start, from the root disk.
	guestRootEnv = "STOCKADE_VM_ROOT"
)

// GuestMain is the guest's PID 1. Started from the initramfs, it loads
// the kernel's modules, mounts the root disk read-only as / and starts
// itself again from there (switchRoot). Then it sets the guest up, takes
// one Plan from the control channel, runs its Spec in the ordinary jail,
// answers with the Reply and powers the guest off. It never returns (PID
// 1 returning panics the kernel, which is what the "panic" fault wants).
func GuestMain() {
	if os.Getenv(guestRootEnv) == "" {
		err := switchRoot()
		// Only a failure comes back: said on the console, which the
		// host quotes when the VMM exits.
		fmt.Fprintln(os.Stderr, "stockade-vm: guest setup:", err)
		unix.Sync()
		_ = unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
		for {
			time.Sleep(time.Hour)
		}
	}
	os.Unsetenv(guestRootEnv)
	c, plan, err := guestSetup()
	var reply Reply
	if err == nil && plan.Serve != nil {
		guestServe(c, plan) // never returns
	}
	if err == nil {
		switch plan.Fault {
		case "panic":
			fmt.Fprintln(os.Stderr, "stockade-vm: fault panic: init exits")
			os.Exit(1)
		case "silent":
			for {
				time.Sleep(time.Hour)
			}
		case "flood":
			line := []byte(strings.Repeat("flood ", 20) + "\n")
			for {
				os.Stderr.Write(line)
			}
		}
		if plan.Fault == "writeroot" {
			reply = Reply{Error: guestWriteRoot()}
		} else if plan.Selftest != nil {
			reply = guestSelftest(plan)
		} else {
			reply = guestRun(plan)
		}
	} else {
		reply.Error = err.Error()
	}
	if c != nil {
		if err := writeFrame(c, reply, json.Marshal); err != nil {
			fmt.Fprintln(os.Stderr, "stockade-vm: reply:", err)
		}
		// The UART drains at its own pace: tcdrain before power-off.
		_ = unix.IoctlSetInt(int(c.Fd()), unix.TCSBRK, 1)
	} else {
		fmt.Fprintln(os.Stderr, "stockade-vm:", reply.Error)
	}
	unix.Sync()
	_ = unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	for {
		time.Sleep(time.Hour)
	}
}

// guestWriteRoot is the "writeroot" fault: the guest's root, as a guest
// kernel the payload took over would, writes its root disk's first
// block, and, refused, clears the disk's read-only flag and writes it
// again. What each step answered comes back as one line (QEMU refuses the
// write: the disk is read-only to it).
func guestWriteRoot() string {
	var out []string
	say := func(what string, err error) error {
		if err == nil {
			out = append(out, what+": done")
		} else {
			out = append(out, what+": "+err.Error())
		}
		return err
	}
	block := bytes.Repeat([]byte("guest was here\n"), 256)
	f, err := os.OpenFile(guestDisk, os.O_RDWR|os.O_SYNC, 0)
	if say("open read-write", err) != nil {
		return strings.Join(out, "; ")
	}
	defer f.Close()
	if _, err := f.WriteAt(block, 0); say("write", err) == nil {
		say("fsync", f.Sync())
		return strings.Join(out, "; ")
	}
	say("clear read-only", unix.IoctlSetPointerInt(int(f.Fd()), unix.BLKROSET, 0))
	_, err = f.WriteAt(block, 0)
	say("write again", err)
	say("fsync", f.Sync())
	return strings.Join(out, "; ")
}

// switchRoot is init's first start, from the initramfs: it loads the
// modules, mounts the root disk read-only, removes the initramfs's files
// (their memory is the guest's), makes the disk the root (as
// switch_root(8) does; the jail's pivot_root refuses to leave the
// initramfs) and starts init again from it. It returns only on failure.
func switchRoot() error {
	steps := []struct {
		what string
		do   func() error
	}{
		{"mount /dev", mounter("devtmpfs", "/dev", "devtmpfs", unix.MS_NOSUID, "mode=0755")},
		{"load the kernel's modules", loadModules},
		{"the root disk", waitDisk},
		{"mount the root disk", mounter(guestDisk, "/newroot", "squashfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, "")},
		{"unmount /dev", func() error { return unix.Unmount("/dev", 0) }},
		{"free the initramfs", func() error { return os.RemoveAll("/usr") }},
		{"enter the root", func() error { return unix.Chdir("/newroot") }},
		{"move it to /", func() error { return unix.Mount(".", "/", "", unix.MS_MOVE, "") }},
		{"chroot", func() error { return unix.Chroot(".") }},
		{"chdir /", func() error { return unix.Chdir("/") }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			return fmt.Errorf("%s: %w", s.what, err)
		}
	}
	err := unix.Exec(guestInit, []string{guestInit, GuestArg}, append(os.Environ(), guestRootEnv+"=1"))
	return fmt.Errorf("start %s from the root disk: %w", guestInit, err)
}

// loadModules loads the modules the initramfs carries, in its list's
// order (each after those it depends on).
func loadModules() error {
	b, err := os.ReadFile(filepath.Join(guestModules, modulesLoad))
	if errors.Is(err, fs.ErrNotExist) {
		return nil // a kernel with what the guest needs built in
	} else if err != nil {
		return err
	}
	for _, name := range strings.Fields(string(b)) {
		f, err := os.Open(filepath.Join(guestModules, name))
		if err != nil {
			return err
		}
		err = unix.FinitModule(int(f.Fd()), "", 0)
		f.Close()
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// waitDisk waits, a bounded while, for the root disk's device: virtio's
// driver probes the disk as its module loads, so it is there at once
// unless the kernel lacks the drivers.
func waitDisk() error {
	for i := 0; ; i++ {
		if _, err := os.Stat(guestDisk); err == nil {
			return nil
		} else if i == 200 {
			return fmt.Errorf("no %s after 10s: the guest kernel needs virtio_pci, virtio_blk and squashfs (vmtest/run --fetch-kernel puts their modules in modules/ beside the kernel): %w", guestDisk, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// guestSetup, on the root disk, mounts what a booted system has (and a
// tmpfs where the guest writes: the root is read-only), enables the
// cgroup controllers, opens the channel and reads the Plan.
func guestSetup() (*os.File, *Plan, error) {
	steps := []struct {
		what string
		do   func() error
	}{
		{"mount /proc", mounter("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")},
		{"mount /sys", mounter("sysfs", "/sys", "sysfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")},
		{"mount /dev", mounter("devtmpfs", "/dev", "devtmpfs", unix.MS_NOSUID, "mode=0755")},
		{"mount /dev/pts", func() error {
			_ = os.Mkdir("/dev/pts", 0o755)
			return unix.Mount("devpts", "/dev/pts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666")
		}},
		{"mount /dev/shm", func() error {
			_ = os.Mkdir("/dev/shm", 0o1777)
			return unix.Mount("shm", "/dev/shm", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777")
		}},
		{"mount /tmp", mounter("tmp", "/tmp", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777")},
		{"mount /run", mounter("run", "/run", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755")},
		{"mount /var/cache", mounter("cache", "/var/cache", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755")},
		{"mount /srv", mounter("srv", "/srv", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755")},
		{"mount the jail's root disk", mountRootfs},
		{"mount cgroup2", mounter("cgroup2", "/sys/fs/cgroup", "cgroup2", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "nsdelegate")},
		{"cgroups", guestCgroups},
		{"hostname", func() error { return unix.Sethostname([]byte("stockade-vm")) }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			return nil, nil, fmt.Errorf("guest setup: %s: %w", s.what, err)
		}
	}
	c, err := os.OpenFile(guestChannel, os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("guest setup: channel %s: %w", guestChannel, err)
	}
	if err := makeRaw(int(c.Fd())); err != nil {
		return c, nil, fmt.Errorf("guest setup: channel %s: raw mode: %w", guestChannel, err)
	}
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	if err := writeFrame(c, hello{Kernel: unix.ByteSliceToString(uts.Release[:])}, json.Marshal); err != nil {
		return c, nil, fmt.Errorf("guest setup: hello: %w", err)
	}
	b, err := readFrame(bufio.NewReaderSize(c, 64<<10), maxPlan, 0)
	if err != nil {
		return c, nil, fmt.Errorf("guest: read the plan: %w", err)
	}
	var p Plan
	if err := json.Unmarshal(b, &p); err != nil {
		return c, nil, fmt.Errorf("guest: decode the plan: %w", err)
	}
	return c, &p, nil
}

func mounter(src, dst, fstype string, flags uintptr, data string) func() error {
	return func() error { return unix.Mount(src, dst, fstype, flags, data) }
}

// mountRootfs mounts a --rootfs DIR's image, when the host attached one,
// read-only at guestRootfs.
func mountRootfs() error {
	if _, err := os.Stat(guestRootfsDisk); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err := os.Mkdir(guestRootfs, 0o755); err != nil {
		return err
	}
	return unix.Mount(guestRootfsDisk, guestRootfs, "squashfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, "")
}

// guestCgroups enables the controllers below the root and in guestCgroup,
// and moves init into a leaf of its own: the cgroup v2 rule of no
// internal processes then holds as on a host whose systemd delegated a
// cgroup to stockade.
func guestCgroups() error {
	const root = "/sys/fs/cgroup"
	b, err := os.ReadFile(root + "/cgroup.controllers")
	if err != nil {
		return err
	}
	var enable []string
	for _, c := range strings.Fields(string(b)) {
		switch c {
		case "cpu", "memory", "pids", "io":
			enable = append(enable, "+"+c)
		}
	}
	ctl := strings.Join(enable, " ")
	for _, dir := range []string{root + "/init", root + guestCgroup} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(root+"/init/cgroup.procs", []byte("1"), 0); err != nil {
		return err
	}
	if err := os.WriteFile(root+"/cgroup.subtree_control", []byte(ctl), 0); err != nil {
		return err
	}
	return os.WriteFile(root+guestCgroup+"/cgroup.subtree_control", []byte(ctl), 0)
}

// makeRaw is cfmakeraw(3): bytes through unchanged, no echo.
func makeRaw(fd int) error {
	t, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return err
	}
	t.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON | unix.IXOFF
	t.Oflag &^= unix.OPOST
	t.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	t.Cflag &^= unix.CSIZE | unix.PARENB | unix.CRTSCTS | unix.CBAUD
	t.Cflag |= unix.CS8 | unix.CLOCAL | unix.CREAD | unix.B115200
	t.Ispeed, t.Ospeed = unix.B115200, unix.B115200
	t.Cc[unix.VMIN], t.Cc[unix.VTIME] = 1, 0
	return unix.IoctlSetTermios(fd, unix.TCSETS, t)
}

// guestRun lays the Plan's files out and runs its Spec in the guest's
// own jail: the second wall.
func guestRun(p *Plan) Reply {
	spec := p.Spec
	spec.Isolation = jail.IsolationJail
	spec.Host = jail.Host{CgroupParent: guestCgroup, CacheDir: guestCacheDir, Providers: guestProviders()}
	if spec.Rootfs != jail.RootfsHost {
		// The host's DIR, packed: the second disk.
		spec.Rootfs = guestRootfs
	}
	stopNet, raw, err := guestNet(&spec, p.Fault)
	if err != nil {
		return Reply{Error: err.Error()}
	}
	defer stopNet()
	if raw != nil {
		return netFault(spec, raw)
	}
	if err := os.MkdirAll(guestDir, 0o755); err != nil {
		return Reply{Error: err.Error()}
	}
	for i, data := range p.RO {
		if i < 0 || i >= len(spec.ReadOnly) {
			return Reply{Error: fmt.Sprintf("plan: read-only file %d of %d", i, len(spec.ReadOnly))}
		}
		name := filepath.Join(guestDir, "ro-"+strconv.Itoa(i))
		if err := os.WriteFile(name, data, 0o644); err != nil {
			return Reply{Error: err.Error()}
		}
		spec.ReadOnly[i].Source = name
	}
	if spec.Workdir != "" {
		// The jail never runs as root and acts as a --workdir's owner:
		// the guest's copy belongs to a user of its own.
		if err := writeTree(guestWork, p.Work, guestWorkOwner, guestWorkOwner); err != nil {
			return Reply{Error: "plan: /work: " + err.Error()}
		}
		if err := os.Chown(guestWork, guestWorkOwner, guestWorkOwner); err != nil {
			return Reply{Error: "plan: /work: " + err.Error()}
		}
		spec.Workdir = guestWork
	}
	var stdin *os.File
	if len(p.Stdin) > 0 {
		name := filepath.Join(guestDir, "stdin")
		if err := os.WriteFile(name, p.Stdin, 0o600); err != nil {
			return Reply{Error: err.Error()}
		}
		f, err := os.Open(name)
		if err != nil {
			return Reply{Error: err.Error()}
		}
		defer f.Close()
		stdin = f
	}
	res, _ := jail.Run(context.Background(), spec, jail.Streams{Stdin: stdin})
	reply := Reply{Result: res}
	if spec.Workdir != "" {
		files, err := readTree(guestWork, spec.WorkSize)
		if err != nil {
			reply.Error = "guest: read /work back: " + err.Error()
		}
		reply.Work = files
	}
	return reply
}
