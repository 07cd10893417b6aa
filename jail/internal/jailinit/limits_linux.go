package jailinit

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// userCounts are the jail user namespace's own limits on kernel objects
// that are charged, level by level, to every user namespace up to the
// host's, where they count against the creator: host root. Without a
// lower limit here, a jail could take all 128 of root's inotify instances
// and starve systemd and udev for as long as it runs. No namespaces at all:
// seccomp refuses unshare and new namespaces already; this is a second lock.
var userCounts = []struct {
	file  string
	value string
}{
	{"max_inotify_instances", "16"},
	{"max_inotify_watches", "8192"},
	{"max_fanotify_groups", "0"},
	{"max_fanotify_marks", "0"},
	{"max_user_namespaces", "0"},
	{"max_net_namespaces", "0"},
	{"max_mnt_namespaces", "0"},
	{"max_pid_namespaces", "0"},
	{"max_ipc_namespaces", "0"},
	{"max_uts_namespaces", "0"},
	{"max_cgroup_namespaces", "0"},
	{"max_time_namespaces", "0"},
}

// limitUserCounts writes userCounts into /proc/sys/user of the jail's user
// namespace (the new /proc; needs CAP_SYS_RESOURCE there). A kernel that
// lacks one of the files lacks that object; any other failure stops the run.
func limitUserCounts() error {
	for _, u := range userCounts {
		err := os.WriteFile("/proc/sys/user/"+u.file, []byte(u.value), 0)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("user.%s = %s: %w", u.file, u.value, err)
		}
	}
	return nil
}

// setAffinity pins this thread, and so the payload forked from it, to the
// CPUs of its limit: what os.sched_getaffinity and nproc report. It is a
// view, not the limit: the CPU quota is, and the payload widening its own
// mask gains it no CPU time.
func setAffinity(c *Config) error {
	if len(c.CPUs) == 0 {
		return nil
	}
	var set unix.CPUSet
	for _, cpu := range c.CPUs {
		set.Set(cpu)
	}
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("CPUs %v: %w", c.CPUs, err)
	}
	return nil
}

func setRlimits(c *Config) error {
	for _, r := range c.Rlimits {
		// syscall.Setrlimit, not unix: for RLIMIT_NOFILE it also stops Go
		// from restoring its startup limit in the children it forks.
		if err := syscall.Setrlimit(r.Resource, &syscall.Rlimit{Cur: r.Cur, Max: r.Max}); err != nil {
			return fmt.Errorf("resource %d: %w", r.Resource, err)
		}
	}
	return nil
}
