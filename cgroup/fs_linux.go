package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// errMissing marks a cgroup file that does not exist: the controller is not
// enabled for the group, or the kernel is too old to have the file.
var errMissing = errors.New("the file does not exist (controller not enabled here, or not in this kernel)")

// readFile reads a small cgroup file with exactly open, read(s) and close;
// os.ReadFile adds an fstat and an extra read per file, and these reads are
// on every run's path.
func readFile(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	buf := make([]byte, 1024)
	n := 0
	for {
		if n == len(buf) {
			buf = append(buf, make([]byte, len(buf))...)
		}
		m, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		}
		if m == 0 {
			return buf[:n], nil
		}
		n += m
		// cgroupfs hands out single-value files in one read; a short read
		// that did not fill the buffer is the whole file for those, but
		// cgroup.procs can be longer, so only stop at EOF.
	}
}

// writeFile writes one value to a cgroup control file. The error names the
// file and, when the kernel's "permission denied" really means the file does
// not exist (kernfs answers O_CREAT that way), says so.
func writeFile(path, value string) error {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err == unix.ENOENT || (err == unix.EACCES && !exists(path)) {
		return fmt.Errorf("write %q to %s: %w", value, path, errMissing)
	}
	if err != nil {
		return fmt.Errorf("write %q to %s: %w", value, path, err)
	}
	defer unix.Close(fd)
	for {
		_, err = unix.Write(fd, []byte(value))
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("write %q to %s: %w", value, path, err)
	}
	return nil
}

func exists(path string) bool {
	var st unix.Stat_t
	return unix.Stat(path, &st) == nil
}

// readPids returns the processes listed in dir/cgroup.procs.
func readPids(dir string) ([]int, error) {
	data, err := readFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("parse %s/cgroup.procs: %w", dir, err)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// subdirs lists the child cgroups of dir.
func subdirs(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out, nil
}

// treePids lists the processes of dir and of every cgroup below it; the
// jailed code could have created nested groups if it was ever given a
// writable cgroupfs, and they would otherwise keep the group from going away.
func treePids(dir string) ([]int, error) {
	pids, err := readPids(dir)
	if err != nil {
		return nil, err
	}
	subs, err := subdirs(dir)
	if err != nil {
		return nil, err
	}
	for _, s := range subs {
		more, err := treePids(s)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		pids = append(pids, more...)
	}
	return pids, nil
}

// removeTree removes the cgroup dir and any cgroups below it, deepest first.
// A missing dir is not an error, so removal can be retried and repeated.
func removeTree(dir string) error {
	err := unix.Rmdir(dir)
	if err == nil || err == unix.ENOENT {
		return nil
	}
	if err != unix.EBUSY && err != unix.ENOTEMPTY {
		return fmt.Errorf("rmdir %s: %w", dir, err)
	}
	subs, lerr := subdirs(dir)
	if lerr != nil || len(subs) == 0 {
		// Busy with processes, not with children: the caller kills and retries.
		return fmt.Errorf("rmdir %s: %w", dir, err)
	}
	for _, s := range subs {
		if err := removeTree(s); err != nil {
			return err
		}
	}
	if err := unix.Rmdir(dir); err != nil && err != unix.ENOENT {
		return fmt.Errorf("rmdir %s: %w", dir, err)
	}
	return nil
}

// backoff sleeps a little longer on each call, from 1ms up to 20ms, so a
// wait for the kernel finishes quickly when the kernel is quick.
type backoff struct{ d time.Duration }

func (b *backoff) sleep() {
	if b.d == 0 {
		b.d = time.Millisecond
	}
	time.Sleep(b.d)
	if b.d < 20*time.Millisecond {
		b.d *= 2
	}
}
