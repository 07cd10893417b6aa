package jailinit

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// rootBuilder executes a plan's steps inside init's private mount
// namespace, below the new root, before pivot_root.
type rootBuilder struct {
	root   int // O_PATH fd of the new root (the tmpfs)
	newDir string
	empty  int // O_PATH fd of an empty directory on the root, for overlays; 0 until needed
}

// buildRoot mounts the root tmpfs on dir and executes the rest of the plan
// below it. Every mount target is opened beneath the root without following
// symlinks; every bind is attached read-only (unless the step says
// otherwise) from the moment it appears, by cloning the source tree,
// setting its attributes while still detached, and only then attaching it.
// That also avoids the MS_REMOUNT dance, which fails in a user namespace
// whenever the source mount has locked flags.
func buildRoot(dir string, steps []Step) error {
	if len(steps) == 0 || steps[0].Kind != StepTmpfs || steps[0].Dest != "/" {
		return errors.New("mount plan does not start with the root tmpfs")
	}
	s0 := steps[0]
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV,
		"mode="+strconv.FormatUint(uint64(s0.Mode), 8)+",size="+strconv.FormatInt(s0.Size, 10)); err != nil {
		return fmt.Errorf("mount tmpfs on %s: %w", dir, err)
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("open new root %s: %w", dir, err)
	}
	b := &rootBuilder{root: fd, newDir: dir}
	defer unix.Close(fd)
	defer func() {
		if b.empty > 0 {
			unix.Close(b.empty)
		}
	}()
	for _, st := range steps[1:] {
		if err := b.do(st); err != nil {
			return fmt.Errorf("%s %s: %w", st.Kind, st.Dest, err)
		}
	}
	return nil
}

func (b *rootBuilder) do(st Step) error {
	switch st.Kind {
	case StepTmpfs:
		flags := unix.MOUNT_ATTR_NOSUID
		if !st.Exec {
			flags |= unix.MOUNT_ATTR_NOEXEC
		}
		if st.Dest != "/dev" {
			flags |= unix.MOUNT_ATTR_NODEV
		}
		opts := map[string]string{
			"mode": strconv.FormatUint(uint64(st.Mode), 8), "size": strconv.FormatInt(st.Size, 10)}
		if st.Inodes > 0 {
			// Without it a tmpfs allows half of the host's RAM pages as
			// inodes: a flood of empty files (or hard links, which tmpfs
			// counts as inodes too) would be bounded by memory alone.
			opts["nr_inodes"] = strconv.FormatInt(st.Inodes, 10)
		}
		return b.mountNew("tmpfs", st.Dest, flags, opts, st.Report)
	case StepProc:
		err := b.mountNew("proc", st.Dest, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC, nil, false)
		if errors.Is(err, unix.EPERM) {
			return fmt.Errorf("%w: the kernel refuses a new procfs in a user namespace while parts of the host's /proc are masked or over-mounted (as in most containers); fix: unmask /proc for the container (docker: --security-opt systempaths=unconfined; podman: --security-opt unmask=ALL; runc/crun: empty linux.maskedPaths and linux.readonlyPaths in config.json)", err)
		}
		return err
	case StepDevpts:
		return b.mountNew("devpts", st.Dest, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC,
			map[string]string{"newinstance": "", "ptmxmode": "0666", "mode": "0620"}, false)
	case StepBind:
		return b.bind(st)
	case StepOverlay:
		return b.workOverlay(st)
	case StepSymlink:
		parent, base := splitDest(st.Dest)
		pfd, err := mkdirAllBeneath(b.root, parent, 0o755)
		if err != nil {
			return err
		}
		defer unix.Close(pfd)
		return unix.Symlinkat(st.Link, pfd, base)
	case StepDir:
		fd, err := mkdirAllBeneath(b.root, st.Dest, st.Mode)
		if err == nil {
			unix.Close(fd)
		}
		return err
	case StepFile:
		return b.file(st)
	case StepMask:
		return b.mask(st)
	}
	return fmt.Errorf("unknown step kind %q", st.Kind)
}

// mountNew creates a fresh filesystem with the new mount API and attaches it
// at dest with its attributes already set. With report, the parent gets a
// copy of the mount's fd: it watches how full the filesystem gets from
// outside, for as long as the run lasts and after, without entering the
// jail and without trusting anything the jail says.
func (b *rootBuilder) mountNew(fstype, dest string, attrs int, opts map[string]string, report bool) error {
	target, err := mkdirAllBeneath(b.root, dest, 0o755)
	if err != nil {
		return err
	}
	defer unix.Close(target)
	fsfd, err := unix.Fsopen(fstype, unix.FSOPEN_CLOEXEC)
	if err != nil {
		return fmt.Errorf("fsopen %s: %w", fstype, err)
	}
	defer unix.Close(fsfd)
	for k, v := range opts {
		if v == "" {
			err = unix.FsconfigSetFlag(fsfd, k)
		} else {
			err = unix.FsconfigSetString(fsfd, k, v)
		}
		if err != nil {
			return fmt.Errorf("%s option %s=%s: %w", fstype, k, v, err)
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return fmt.Errorf("create %s: %w", fstype, err)
	}
	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, attrs)
	if err != nil {
		return fmt.Errorf("fsmount %s: %w", fstype, err)
	}
	defer unix.Close(mfd)
	if err := unix.MoveMount(mfd, "", target, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("attach %s: %w", fstype, err)
	}
	if report {
		b := []byte(`{"t":"` + string(MsgWork) + `"}`)
		if err := unix.Sendmsg(ctlFD, b, unix.UnixRights(mfd), nil, 0); err != nil {
			return fmt.Errorf("hand %s to the parent: %w", dest, err)
		}
	}
	return nil
}

func (b *rootBuilder) bind(st Step) error {
	var src int
	var err error
	if st.User {
		src, err = OpenNoSymlinks(st.Source)
	} else {
		src, err = unix.Open(st.Source, unix.O_PATH|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		if err != nil {
			err = sourceError(st.Source, err)
		}
	}
	if err != nil {
		return err
	}
	defer unix.Close(src)
	var fi unix.Stat_t
	if err := unix.Fstat(src, &fi); err != nil {
		return fmt.Errorf("stat %s: %w", st.Source, err)
	}
	isDir := fi.Mode&unix.S_IFMT == unix.S_IFDIR
	if st.Dir && !isDir {
		return fmt.Errorf("%s is not a directory", st.Source)
	}
	if st.Device && fi.Mode&unix.S_IFMT != unix.S_IFCHR {
		return fmt.Errorf("%s is not a character device", st.Source)
	}
	if !st.Device && !isDir && fi.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("%s is neither a directory nor a regular file", st.Source)
	}
	target, err := b.mountpoint(st.Dest, isDir)
	if err != nil {
		return err
	}
	defer unix.Close(target)

	var tree int
	if st.Hide && !st.Writable {
		tree, err = b.hiddenTree(st, src, isDir)
	} else {
		tree, err = unix.OpenTree(src, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH|unix.AT_RECURSIVE)
		if err != nil {
			err = fmt.Errorf("clone mount of %s: %w", st.Source, err)
		}
	}
	if err != nil {
		return err
	}
	defer unix.Close(tree)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID}
	if !st.Writable {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	if !st.Device {
		attr.Attr_set |= unix.MOUNT_ATTR_NODEV
	}
	if !st.Exec {
		attr.Attr_set |= unix.MOUNT_ATTR_NOEXEC
	}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
		return fmt.Errorf("set attributes of %s: %w", st.Source, err)
	}
	if err := unix.MoveMount(tree, "", target, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("attach %s: %w", st.Source, err)
	}
	return nil
}

// mountpoint makes (or finds) dest below the root: a directory, or an empty
// file for a file bind, and returns an O_PATH fd of it. A file mount point
// is nearly always new on the root tmpfs, so it is created first and an
// existing one (a prepared root's) opened when creating finds it there.
func (b *rootBuilder) mountpoint(dest string, dir bool) (int, error) {
	if dir {
		return mkdirAllBeneath(b.root, dest, 0o755)
	}
	parent, base := splitDest(dest)
	pfd, err := mkdirAllBeneath(b.root, parent, 0o755)
	if err != nil {
		return -1, err
	}
	defer unix.Close(pfd)
	if err := b.createFile(pfd, base, 0o644, nil); err != nil && !errors.Is(err, unix.EEXIST) {
		return -1, err
	}
	fd, err := openBeneath(pfd, base, unix.O_PATH)
	if err != nil {
		return -1, fmt.Errorf("open mount point %s: %w", dest, err)
	}
	return fd, nil
}

// createFile creates name, a single component, in the directory behind the
// O_PATH fd pfd (openat resolves names from an O_PATH directory fd as from
// any other) and writes data to it with plain system calls: an os.File
// cost an fcntl, a zero-length write for every empty mount point, and its
// cleanup's bookkeeping.
func (b *rootBuilder) createFile(pfd int, name string, mode uint32, data []byte) error {
	fd, err := unix.Openat(pfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
	if err != nil {
		return fmt.Errorf("create %s: %w", name, err)
	}
	defer unix.Close(fd)
	for len(data) > 0 {
		n, err := unix.Write(fd, data)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
		if n == 0 {
			return fmt.Errorf("write %s: %w", name, io.ErrShortWrite)
		}
		data = data[n:]
	}
	return nil
}

// file writes a generated file. A prepared root brings its own read-only
// /etc; there the content goes into a staging file on the root tmpfs and is
// bound over the root's copy, and an Optional step is skipped when the root
// has no such file.
func (b *rootBuilder) file(st Step) error {
	parent, base := splitDest(st.Dest)
	pfd, err := mkdirAllBeneath(b.root, parent, 0o755)
	if err == nil {
		err = b.createFile(pfd, base, st.Mode, []byte(st.Data))
		unix.Close(pfd)
		if err == nil || !st.Optional {
			return err
		}
	} else if !st.Optional {
		return err
	}
	// Over a prepared root's file.
	existing, err := openBeneath(b.root, st.Dest, unix.O_PATH)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open %s: %w", st.Dest, err)
	}
	unix.Close(existing)
	stage, err := mkdirAllBeneath(b.root, ".stockade", 0o755)
	if err != nil {
		return err
	}
	defer unix.Close(stage)
	if err := b.createFile(stage, base, st.Mode, []byte(st.Data)); err != nil {
		return err
	}
	return b.bind(Step{Kind: StepBind, Dest: st.Dest, Source: b.newDir + "/.stockade/" + base})
}

// mask binds a generated file read-only over a file of the jail's procfs
// whose content is the host's, not the jail's (boot_id, cmdline, loadavg).
// The staged copy lives on the root tmpfs, so mountinfo names only
// /.stockade/masks/NAME. The payload cannot remove it: it has no
// capabilities and the filter refuses the mount family.
func (b *rootBuilder) mask(st Step) error {
	stage, err := mkdirAllBeneath(b.root, ".stockade/masks", 0o755)
	if err != nil {
		return err
	}
	defer unix.Close(stage)
	name := strings.ReplaceAll(strings.Trim(st.Dest, "/"), "/", "_")
	if err := b.createFile(stage, name, 0o444, []byte(st.Data)); err != nil {
		return err
	}
	return b.bind(Step{Kind: StepBind, Dest: st.Dest, Source: b.newDir + "/.stockade/masks/" + name})
}

// workOverlay puts a writable layer over a user's directory: every write of
// the jail lands in the upper tmpfs (bounded in size and inodes, charged
// to the writer's memory cgroup), the directory itself is only read, and
// the parent copies the upper layer back after the run. The upper tmpfs
// is detached from the tree once the overlay holds it, so the jail cannot
// reach the layer beneath its /work.
func (b *rootBuilder) workOverlay(st Step) error {
	lower, err := OpenNoSymlinks(st.Source)
	if err != nil {
		return err
	}
	defer unix.Close(lower)
	var fi unix.Stat_t
	if err := unix.Fstat(lower, &fi); err != nil || fi.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("%s is not a directory", st.Source)
	}
	for _, d := range []string{st.Upper + "/upper", st.Upper + "/work"} {
		fd, err := mkdirAllBeneath(b.root, d, 0o755)
		if err != nil {
			return err
		}
		unix.Close(fd)
	}
	target, err := mkdirAllBeneath(b.root, st.Dest, 0o755)
	if err != nil {
		return err
	}
	defer unix.Close(target)
	fsfd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return fmt.Errorf("overlay over %s: %w (a --workdir is an overlay whose writes --work-size bounds: load the overlay module)", st.Source, err)
	}
	defer unix.Close(fsfd)
	upper := b.newDir + st.Upper
	// The lower layer is exactly the directory opened without symlinks:
	// overlay resolves "." from our working directory, which is that fd
	// (/proc/self/fd is closed to us: init is not dumpable). pivotInto
	// moves the working directory on. userxattr: in a user namespace
	// overlay keeps its whiteout and opaque marks in user.overlay.*.
	if err := unix.Fchdir(lower); err != nil {
		return fmt.Errorf("enter %s: %w", st.Source, err)
	}
	// The upper and work directories go by /proc/self/fd/N too, so the
	// jail's mountinfo names no host path (the run directory's).
	var layerFDs [2]int
	for i, d := range []string{upper + "/upper", upper + "/work"} {
		if layerFDs[i], err = unix.Open(d, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err != nil {
			return fmt.Errorf("open %s: %w", d, err)
		}
		defer unix.Close(layerFDs[i])
	}
	for _, o := range [][2]string{
		{"lowerdir", "."},
		{"upperdir", "/proc/self/fd/" + strconv.Itoa(layerFDs[0])},
		{"workdir", "/proc/self/fd/" + strconv.Itoa(layerFDs[1])},
		{"userxattr", ""},
	} {
		if o[1] == "" {
			err = unix.FsconfigSetFlag(fsfd, o[0])
		} else {
			err = unix.FsconfigSetString(fsfd, o[0], o[1])
		}
		if err != nil {
			return fmt.Errorf("overlay option %s=%s: %w", o[0], o[1], err)
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return fmt.Errorf("create overlay over %s: %w (a mount point inside it, which the kernel locks to it in the jail's user namespace, or a kernel before Linux 5.11, which has no overlay in a user namespace)", st.Source, err)
	}
	attrs := unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV
	if !st.Exec {
		attrs |= unix.MOUNT_ATTR_NOEXEC
	}
	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, attrs)
	if err != nil {
		return fmt.Errorf("fsmount overlay: %w", err)
	}
	defer unix.Close(mfd)
	if err := unix.MoveMount(mfd, "", target, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("attach overlay: %w", err)
	}
	if err := unix.Unmount(upper, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the upper layer: %w", err)
	}
	parent, base := splitDest(st.Upper)
	pfd, err := openBeneath(b.root, parent, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	return unix.Unlinkat(pfd, base, unix.AT_REMOVEDIR)
}
