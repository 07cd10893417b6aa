//go:build !linux

package rootfs

import "io/fs"

// owner is unknown off Linux; Check then skips the ownership test.
func owner(fs.FileInfo) (uid, gid int, ok bool) { return 0, 0, false }
