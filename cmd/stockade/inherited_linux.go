package main

import "github.com/stockade/stockade/internal/fds"

// keepInheritedToOurselves marks every descriptor stockade inherited above
// stderr close-on-exec, so that no process it starts (a jail's init, the
// pip and debootstrap of rootfs build) receives one. A caller's shell
// (exec 7</), a CI runner, systemd (journal streams, LISTEN_FDS) and flock
// wrappers leave descriptors open; reaching a jail, one on the host's /
// lists it, one on a root-only file writes to it. Marked, not closed:
// serve still takes its socket from LISTEN_FDS, and --audit-log /dev/fd/N
// still opens. Every jail's init closes what it inherited too; this is the
// second lock.
func keepInheritedToOurselves() error { return fds.CloseOnExecFrom(3) }
