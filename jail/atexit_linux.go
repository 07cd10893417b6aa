package jail

import (
	"os"
	"path/filepath"
	"strconv"
)

// A run that ends at its payload's exit (StartOptions.AtExit) answers
// before the jail is torn down. Once the payload has exited, init reports
// it and exits; what follows is the kernel's teardown of the namespaces
// (unmounting the jail's root and views waits for an RCU grace period),
// init's reaping, and the cgroup's and run directory's removal: together
// several milliseconds, far more on a busy host, that a pooled server run
// should not make its caller wait for. None of it changes what the run
// did or what it was held to, provided nothing of the jail is left
// running: so the early end is taken only when init has no child left.
//
// Every process of a pid namespace descends from its init, and one whose
// parent dies is re-parented to init (or to a subreaper, itself a
// descendant of init), so init without children means the namespace holds
// init alone. Init reaps the payload before it reports its exit, and init
// forks nothing else, so an orphan (a daemon the payload left) shows as a
// child here; the run then ends the old way, with init's reaping, which
// kills the orphans first, and the verdict sees what they did (a fork
// bomb's pids, an OOM kill, a refused call). The kernel moves a re-parented
// child under the tasklist lock that reading children takes.

// endsAtExit is called once init has reported the payload's exit: true,
// and the run is over with init still to reap (Close waits for it), when
// init is alone in the jail.
func (sv *supervision) endsAtExit() bool {
	if !initAlone(sv.cmd.Process.Pid) {
		return false
	}
	sv.atExit = true
	return true
}

// initAlone reports whether the process pid (the jail's init, not yet
// reaped by us, so the pid is still its) has no children, from
// /proc/PID/task/*/children (a child is listed under the thread that made
// it, or that it was re-parented to). False when that cannot be read: a
// kernel without CONFIG_PROC_CHILDREN ends its runs the old way. Once init
// has exited the children are gone too (the kernel killed and reaped them
// before), and the read says so, or fails.
func initAlone(pid int) bool {
	tasks := filepath.Join("/proc", strconv.Itoa(pid), "task")
	// The threads in the kernel's own order, not sorted by name: while
	// init exits, its children move from an exiting thread to a later
	// live one, so a scan in that order meets them, where a scan sorted
	// as strings could read the later thread first and miss them.
	d, err := os.Open(tasks)
	if err != nil {
		return false
	}
	threads, err := d.Readdirnames(-1)
	d.Close()
	if err != nil || len(threads) == 0 {
		return false
	}
	for _, t := range threads {
		b, err := os.ReadFile(filepath.Join(tasks, t, "children"))
		if err != nil || len(b) > 0 {
			return false
		}
	}
	return true
}

// reapAtClose waits for init to finish exiting, after a run that ended at
// its payload's exit, before Close removes the cgroup (which must be
// empty) and the run directory. Init exits by itself after its report;
// the kill is for an init that somehow does not.
func (sv *supervision) reapAtClose() {
	if !sv.atExit {
		return
	}
	_ = sv.cmd.Process.Kill()
	sv.finish()
}
