package cgroup

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	cgroups "github.com/containerd/cgroups/v3"
)

// procCgroups is one process's place in every hierarchy, from /proc/PID/cgroup.
type procCgroups struct {
	v1      map[string]string // controller (or "name=systemd") -> path
	unified string            // the "0::" line's path, "" if absent
}

func parseProcCgroup(r io.Reader) (procCgroups, error) {
	v1, unified, err := cgroups.ParseCgroupFromReaderUnified(r)
	if err != nil {
		return procCgroups{}, fmt.Errorf("parse /proc/self/cgroup: %w", err)
	}
	return procCgroups{v1: v1, unified: unified}, nil
}

// mountEntry is the part of a /proc/self/mountinfo line a cgroup needs.
type mountEntry struct {
	root       string   // the path inside the filesystem that is mounted here
	mountPoint string   // where it is mounted
	readOnly   bool     // the mount (not the superblock) is read-only
	fsType     string   // "cgroup" or "cgroup2" for us
	superOpts  []string // for cgroup v1, the controllers of the hierarchy
}

// parseMountinfo returns the cgroup and cgroup2 mounts; other lines are skipped.
func parseMountinfo(r io.Reader) ([]mountEntry, error) {
	var out []mountEntry
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for s.Scan() {
		line := s.Text()
		// Fields: id parent maj:min root mountpoint opts [optional...] - fstype source superopts.
		// The optional fields have variable count, hence the separator search.
		left, right, ok := strings.Cut(line, " - ")
		if !ok {
			return nil, fmt.Errorf("parse mountinfo line %q: no separator", line)
		}
		lf, rf := strings.Fields(left), strings.Fields(right)
		if len(lf) < 6 || len(rf) < 3 {
			return nil, fmt.Errorf("parse mountinfo line %q: too few fields", line)
		}
		if rf[0] != "cgroup" && rf[0] != "cgroup2" {
			continue
		}
		e := mountEntry{
			root:       unescapeMount(lf[3]),
			mountPoint: unescapeMount(lf[4]),
			fsType:     rf[0],
			superOpts:  strings.Split(rf[2], ","),
		}
		for _, o := range strings.Split(lf[5], ",") {
			if o == "ro" {
				e.readOnly = true
			}
		}
		out = append(out, e)
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	return out, nil
}

// unescapeMount undoes the kernel's octal escapes (\040 for space and so on)
// in mountinfo paths.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// keyedValue finds "key value" in a flat keyed cgroup file (cpu.stat,
// memory.events, pids.events, memory.oom_control, cpuacct.stat). It does not
// allocate, because Stats and CPUUsage sit on every run's path.
func keyedValue(data []byte, key string) (uint64, bool) {
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		k, v, ok := bytes.Cut(line, []byte{' '})
		if !ok || string(k) != key {
			continue
		}
		n, err := parseValue(v)
		if err != nil {
			return 0, false
		}
		return n, true
	}
	return 0, false
}

// parseValue parses a single-value cgroup file such as memory.peak or
// pids.max; "max" (no limit) reads as math.MaxUint64.
func parseValue(data []byte) (uint64, error) {
	s := strings.TrimSpace(string(data))
	if s == "max" {
		return math.MaxUint64, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse cgroup value %q: %w", s, err)
	}
	return n, nil
}
