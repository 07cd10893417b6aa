package jailinit

import (
	"fmt"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// hiddenTree returns a detached mount that shows the source read-only
// through an overlay instead of as a bind of the host's mount.
//
// The kernel finds the listener of a path-named unix socket by the inode
// the path leads to, and the peer of a FIFO by its inode too. Through an
// overlay the path leads to the overlay's inode, which no host process is
// bound to: connect(2) gets ECONNREFUSED and a FIFO opened there is a
// different pipe. That holds for every socket below the source, including
// those a host service creates after the run started, which no check
// before the run could catch. Read-only, nosuid, nodev, MS_RDONLY do not
// help: connecting needs write permission on the socket, and the kernel
// does not refuse it on a read-only mount.
//
// The layers are named as /proc/self/fd/N, which is also what the jail's
// mountinfo shows instead of the host path (user and project names).
//
// A file is taken from an overlay of its parent directory, which is never
// attached anywhere: only the file is.
func (b *rootBuilder) hiddenTree(st Step, src int, isDir bool) (int, error) {
	if isDir {
		return b.overlay(src, st.Source)
	}
	parent, err := OpenNoSymlinks(filepath.Dir(st.Source))
	if err != nil {
		return -1, err
	}
	defer unix.Close(parent)
	mnt, err := b.overlay(parent, filepath.Dir(st.Source))
	if err != nil {
		return -1, err
	}
	defer unix.Close(mnt)
	// Kernels before 6.15 or so clone nothing out of a detached mount
	// (EINVAL): attach the overlay on a staging directory of the root
	// tmpfs for the time of the clone, then detach it again.
	stage, err := mkdirAllBeneath(b.root, ".stockade/stage", 0o755)
	if err != nil {
		return -1, err
	}
	defer unix.Close(stage)
	if err := unix.MoveMount(mnt, "", stage, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return -1, fmt.Errorf("stage the overlay of %s: %w", filepath.Dir(st.Source), err)
	}
	stagePath := b.newDir + "/.stockade/stage"
	defer unix.Unmount(stagePath, unix.MNT_DETACH)
	tree, err := unix.OpenTree(unix.AT_FDCWD, stagePath+"/"+filepath.Base(st.Source),
		unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_SYMLINK_NOFOLLOW)
	if err != nil {
		return -1, fmt.Errorf("clone %s from its overlay: %w", st.Source, err)
	}
	var fi unix.Stat_t
	if err := unix.Fstat(tree, &fi); err != nil || fi.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(tree)
		return -1, fmt.Errorf("%s changed while it was being bound (no longer a regular file)", st.Source)
	}
	return tree, nil
}

// overlay makes a detached read-only overlay whose only content is the
// directory dir (an overlay without an upper layer needs two lower ones;
// the second is empty).
func (b *rootBuilder) overlay(dir int, name string) (int, error) {
	if b.empty <= 0 {
		fd, err := mkdirAllBeneath(b.root, ".stockade/empty", 0o755)
		if err != nil {
			return -1, fmt.Errorf("empty overlay layer: %w", err)
		}
		b.empty = fd
	}
	fsfd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("overlay of %s: %w (read-only binds are overlays, so that the host's unix sockets below them stay out of reach: load the overlay module)", name, err)
	}
	defer unix.Close(fsfd)
	layers := "/proc/self/fd/" + strconv.Itoa(dir) + ":/proc/self/fd/" + strconv.Itoa(b.empty)
	if err := unix.FsconfigSetString(fsfd, "lowerdir", layers); err != nil {
		return -1, fmt.Errorf("overlay of %s: lowerdir: %w", name, err)
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return -1, fmt.Errorf("overlay of %s: %w (EINVAL: most often a mount point inside it, which the kernel locks to it in the jail's user namespace)", name, err)
	}
	mnt, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return -1, fmt.Errorf("overlay of %s: fsmount: %w", name, err)
	}
	return mnt, nil
}
