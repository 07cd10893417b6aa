package jail

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"
)

// The file system calls copy-back makes, each relative to a directory fd
// and never through a symlink: DIR belongs to its owner, who can swap any
// name in it for a symlink at any moment, and copy-back runs as root.

// openUpper opens a directory of the upper layer (the jail's, and the
// jail is gone; still, never through its symlinks).
func openUpper(dirfd int, name string) (int, error) {
	return unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
}

// whyNotOpened says in words why beneath.OpenDirSameMount refused name
// of dirfd.
func whyNotOpened(dirfd int, name string, err error) string {
	var st unix.Stat_t
	switch {
	case errors.Is(err, unix.EXDEV):
		return "a mount point (copy-back never crosses one)"
	case errors.Is(err, unix.ENOENT):
		return "gone"
	case !errors.Is(err, unix.ELOOP) && !errors.Is(err, unix.ENOTDIR):
		return err.Error()
	case unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK:
		// O_DIRECTORY makes the kernel say ENOTDIR for a symlink.
		return "a symlink now (not followed)"
	}
	return "no longer a directory"
}

// hostEntry is an entry of DIR as copy-back finds it.
type hostEntry struct {
	exists  bool
	dir     bool
	mount   bool // another mount, or a mount point: never touched
	changed bool // made or changed since the run began: the host's, kept
	ino     uint64
	mode    uint32 // type and permission bits
	uid     uint32
	gid     uint32
}

// statHost looks at name in the host directory dirfd without following
// it.
func (c *copier) statHost(dirfd int, name string) (hostEntry, error) {
	var st unix.Statx_t
	err := unix.Statx(dirfd, name, unix.AT_SYMLINK_NOFOLLOW|unix.AT_STATX_SYNC_AS_STAT,
		unix.STATX_TYPE|unix.STATX_MODE|unix.STATX_INO|unix.STATX_CTIME|unix.STATX_UID|unix.STATX_GID|unix.STATX_MNT_ID, &st)
	if errors.Is(err, unix.ENOENT) {
		return hostEntry{}, nil
	}
	if err != nil {
		return hostEntry{}, err
	}
	h := hostEntry{exists: true, dir: st.Mode&unix.S_IFMT == unix.S_IFDIR, ino: st.Ino,
		mode: uint32(st.Mode), uid: st.Uid, gid: st.Gid}
	// A mount point shows the root of what is mounted there: another
	// mount id or, before Linux 5.8, another device (then a btrfs
	// subvolume counts as one too, and is left alone).
	if st.Mask&unix.STATX_MNT_ID != 0 && c.seen.mnt != 0 {
		h.mount = st.Mnt_id != c.seen.mnt
	} else {
		h.mount = devOf(&st) != c.seen.dev
	}
	h.changed = !before(st.Ctime, c.seen.since)
	return h, nil
}

func readlinkAt(dirfd int, name string) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(dirfd, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// opaque reports overlay's mark on an upper directory that replaced the
// lower one entirely.
func opaque(dirfd int) bool {
	buf := make([]byte, 8)
	n, err := unix.Fgetxattr(dirfd, "user.overlay.opaque", buf)
	return err == nil && n == 1 && buf[0] == 'y'
}

// copyData copies the data extents of in to out and gives out in's size,
// so holes stay holes (a 1 TiB sparse file costs its written pages, not a
// terabyte); buf is reused across files. It stops at deadline.
func copyData(in, out int, buf []byte, deadline time.Time) (int64, error) {
	var st unix.Stat_t
	if err := unix.Fstat(in, &st); err != nil {
		return 0, err
	}
	if st.Size == 0 {
		return 0, nil // a fresh file is already empty
	}
	var copied int64
	for off := int64(0); off < st.Size; {
		data, err := unix.Seek(in, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole is left
		}
		if err != nil {
			return copied, err
		}
		hole, err := unix.Seek(in, data, unix.SEEK_HOLE)
		if err != nil {
			return copied, err
		}
		for data < hole {
			if !deadline.IsZero() && time.Now().After(deadline) {
				return copied, errDeadline
			}
			n, err := unix.Pread(in, buf[:min(int64(len(buf)), hole-data)], data)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				return copied, err
			}
			if n == 0 {
				break
			}
			if _, err := unix.Pwrite(out, buf[:n], data); err != nil {
				return copied, err
			}
			data += int64(n)
			copied += int64(n)
		}
		off = hole
	}
	return copied, unix.Ftruncate(out, st.Size)
}

// errDeadline is copy-back running out of time.
var errDeadline = errors.New("past its deadline")
