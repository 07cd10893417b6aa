package jailinit

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// pivotInto makes dir the root and detaches the old one, then makes the root
// tmpfs read-only. pivot_root(".", ".") stacks the old root on top of the
// new one at "/", so unmounting "." removes exactly the old root without
// needing a directory to park it in.
func pivotInto(dir string) error {
	if err := unix.Chdir(dir); err != nil {
		return fmt.Errorf("chdir %s: %w", dir, err)
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root %s: %w", dir, err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach old root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	// The root and /dev tmpfs belong to the jail user (init made them as
	// that user); read-only, owning them gives it nothing. Non-recursive:
	// /tmp, /work, /dev/shm and /dev/pts stay writable.
	for _, p := range []string{"/", "/dev"} {
		attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID}
		if p == "/" {
			attr.Attr_set |= unix.MOUNT_ATTR_NODEV
		}
		if err := unix.MountSetattr(unix.AT_FDCWD, p, 0, &attr); err != nil {
			return fmt.Errorf("remount %s read-only: %w", p, err)
		}
	}
	return nil
}
