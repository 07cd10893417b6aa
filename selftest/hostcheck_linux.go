package selftest

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/stockade/stockade/jail"
)

// hostState is what a run must leave as it found it: the mounts of this
// process's namespace that are stockade's (a run mounts only in the jail's
// own namespace; one leaking out would sit in a run directory or a
// stockade state directory), and the cgroups and run directories named
// after this process (other stockades on the host have their own pid in
// the names, and are not ours to judge). Other mounts are the host's: a
// container or an automount starting meanwhile is not a leftover.
type hostState struct {
	mounts  int
	cgroups []string
	runDirs []string
}

func snapshotHost() hostState {
	var s hostState
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		s.mounts = stockadeMounts(string(b))
	}
	s.cgroups = ownCgroups()
	base := jail.RunBase()
	ents, _ := os.ReadDir(base)
	for _, e := range ents {
		if ranByUs(e.Name()) {
			s.runDirs = append(s.runDirs, filepath.Join(base, e.Name()))
		}
	}
	return s
}

// leftSince says what s has that before had not, or "" when nothing.
func (s hostState) leftSince(before hostState) string {
	var left []string
	if s.mounts > before.mounts {
		left = append(left, fmt.Sprintf("%d extra mounts", s.mounts-before.mounts))
	}
	if n := len(s.cgroups) - len(before.cgroups); n > 0 {
		left = append(left, fmt.Sprintf("cgroups %v", s.cgroups))
	}
	if n := len(s.runDirs) - len(before.runDirs); n > 0 {
		left = append(left, fmt.Sprintf("run directories %v", s.runDirs))
	}
	return strings.Join(left, "; ")
}

// stockadeMounts counts the mountinfo lines whose mount point is in a
// directory of stockade's: its name has "stockade" in it (the run base,
// /run/stockade, a fallback $TMPDIR/stockade-<uid>.*).
func stockadeMounts(mountinfo string) int {
	n := 0
	for _, l := range strings.Split(mountinfo, "\n") {
		f := strings.Fields(l)
		if len(f) > 4 && strings.Contains(f[4], "stockade") {
			n++
		}
	}
	return n
}

// ranByUs reports whether a run directory or cgroup name is of a run of
// this process: [stockade.]r<slot>-<pid>-<random>.
func ranByUs(name string) bool {
	slot, rest, ok := strings.Cut(strings.TrimPrefix(name, "stockade."), "-")
	return ok && len(slot) > 1 && slot[0] == 'r' && strings.HasPrefix(rest, strconv.Itoa(os.Getpid())+"-")
}

// ownCgroups lists the stockade.r<slot>-<pid>-* cgroups of this process below its own
// cgroup in every hierarchy, and one level up (on v2 stockade may have moved
// itself into a supervisor leaf beside the runs).
func ownCgroups() []string {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return nil
	}
	defer f.Close()
	seen := map[string]bool{}
	var found []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 || strings.HasPrefix(parts[1], "name=") {
			continue
		}
		mnt := "/sys/fs/cgroup/" + strings.Split(parts[1], ",")[0]
		if parts[1] == "" {
			mnt = "/sys/fs/cgroup"
			if _, err := os.Stat("/sys/fs/cgroup/unified/cgroup.procs"); err == nil {
				mnt = "/sys/fs/cgroup/unified"
			}
		}
		own := filepath.Join(mnt, parts[2])
		for _, dir := range []string{own, filepath.Dir(own)} {
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				p := filepath.Join(dir, e.Name())
				if e.IsDir() && strings.HasPrefix(e.Name(), "stockade.") && ranByUs(e.Name()) && !seen[p] {
					seen[p] = true
					found = append(found, p)
				}
			}
		}
	}
	return found
}

// markerProcs lists host processes whose command line carries marker.
func markerProcs(marker string) []string {
	var found []string
	ents, _ := os.ReadDir("/proc")
	self := strconv.Itoa(os.Getpid())
	for _, e := range ents {
		if e.Name() == self {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(marker)) {
			found = append(found, e.Name()+": "+oneLine(strings.ReplaceAll(string(b), "\x00", " "), 80))
		}
	}
	return found
}
