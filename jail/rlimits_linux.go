package jail

import (
	"os"
	"time"

	"github.com/stockade/stockade/jail/internal/jailinit"
	"golang.org/x/sys/unix"
)

// jailMsgQueueBytes is what one jail may hold in POSIX message queues, the
// kernel's default RLIMIT_MSGQUEUE.
const jailMsgQueueBytes = 819200

// uncapJailQueues lifts stockade's own RLIMIT_MSGQUEUE. Since Linux 5.14 a
// jail's message queue bytes are counted twice: for the jail user in the
// jail's user namespace, against the payload's own RLIMIT_MSGQUEUE, and for
// the namespace's creator (root, for every jail) in the host's, against the
// creator's RLIMIT_MSGQUEUE at the time of the clone. With the default
// there, one jail's queues made mq_open fail with EMFILE in every other
// jail. Without a cap at the creator, each jail keeps its own allowance
// (restored by init, see rlimitsFor), and the messages themselves are
// charged to the jail's memory cgroup. Raising it takes CAP_SYS_RESOURCE;
// without it (a container's root) the jails keep sharing one allowance, a
// limit docs/security.md lists, and the run goes ahead: queues are a nicety, not
// isolation. A normal user's jails are all that user anyway.
func uncapJailQueues() {
	if os.Geteuid() != 0 {
		return
	}
	inf := unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY}
	_ = unix.Setrlimit(unix.RLIMIT_MSGQUEUE, &inf)
}

func rlimitsFor(spec Spec) []jailinit.Rlimit {
	fsize := spec.Rlimits.FileSize
	if fsize == 0 {
		fsize = unix.RLIM_INFINITY
	}
	r := []jailinit.Rlimit{
		{Resource: unix.RLIMIT_CORE, Cur: 0, Max: 0},
		{Resource: unix.RLIMIT_NOFILE, Cur: spec.Rlimits.OpenFiles, Max: spec.Rlimits.OpenFiles},
		{Resource: unix.RLIMIT_FSIZE, Cur: fsize, Max: fsize},
		// The kernel's default, restored here for the payload: stockade
		// itself runs without one (see uncapJailQueues).
		{Resource: unix.RLIMIT_MSGQUEUE, Cur: jailMsgQueueBytes, Max: jailMsgQueueBytes},
	}
	if c := spec.Cgroup.CPUTime; c > 0 {
		// The per-process backstop under the cgroup poll (and the only CPU
		// limit without a cgroup): a little more than the limit, so that
		// the poll normally ends the run first. The soft limit sends
		// SIGXCPU, the hard one a second later SIGKILL.
		s := cpuBackstop(c)
		r = append(r, jailinit.Rlimit{Resource: unix.RLIMIT_CPU, Cur: s, Max: s + 1})
	}
	return r
}

// cpuBackstop is the soft RLIMIT_CPU, in seconds, under a CPU-time limit
// of c: a little more than c, so that the cgroup's poll normally ends the
// run first (the hard limit is a second later).
func cpuBackstop(c time.Duration) uint64 { return uint64(c/time.Second) + 2 }
