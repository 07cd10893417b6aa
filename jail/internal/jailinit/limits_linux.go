package jailinit

import (
	"errors"
	"fmt"
	"io"
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
// The directory is opened once and each file written with plain system
// calls: this step runs after the cgroup placement, on the path to the
// payload's start, and os.WriteFile walked /proc/sys/user and added an
// fstat and an os.File for each of the twelve files.
func limitUserCounts() error {
	dir, err := unix.Open("/proc/sys/user", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open /proc/sys/user: %w", err)
	}
	defer unix.Close(dir)
	for _, u := range userCounts {
		if err := writeSysctl(dir, u.file, u.value); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("user.%s = %s: %w", u.file, u.value, err)
		}
	}
	return nil
}

// writeSysctl writes value to the file name of the directory dir; a sysctl
// takes the whole value in one write.
func writeSysctl(dir int, name, value string) error {
	fd, err := unix.Openat(dir, name, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	n, err := unix.Write(fd, []byte(value))
	if err == nil && n != len(value) {
		err = io.ErrShortWrite
	}
	return err
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
