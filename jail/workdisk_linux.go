package jail

import (
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// workSampleEvery is how often the parent looks at how full /work is while
// the run lasts; it looks once more after the jail is gone.
const workSampleEvery = 50 * time.Millisecond

// workDisk watches a run's /work tmpfs from the parent, through the mount fd
// init hands over: fstatfs on it reads the kernel's own block and inode
// counters, so nothing the jail says is trusted and nothing of the jail's
// is entered. The fd also keeps the tmpfs alive after the jail's mount
// namespace is gone, for the last look and for Prepared.Workdir; close
// releases it and its pages (charged to the run's memory cgroup, which
// lingers offline until then).
type workDisk struct {
	mu         sync.Mutex
	fd         int
	open       bool
	peakBytes  uint64
	peakInodes uint64
	full       bool
}

// attach takes the fd from init's message; a second one is refused.
func (w *workDisk) attach(fd int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.open {
		return false
	}
	w.fd, w.open = fd, true
	w.sampleLocked()
	return true
}

// watch samples until stop is closed.
func (w *workDisk) watch(stop <-chan struct{}) {
	t := time.NewTicker(workSampleEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			w.mu.Lock()
			w.sampleLocked()
			w.mu.Unlock()
		}
	}
}

// sampleLocked records the peak use, and whether /work was full: no inode
// left, or less than 1/64 of its blocks free. The margin is there because
// a write or fallocate that does not fit fails without filling the last
// bytes (fallocate gives back all it took), so "full" rarely means zero.
func (w *workDisk) sampleLocked() {
	if !w.open {
		return
	}
	var st unix.Statfs_t
	if unix.Fstatfs(w.fd, &st) != nil || st.Blocks == 0 {
		return
	}
	used := (st.Blocks - st.Bfree) * uint64(st.Bsize)
	inodes := st.Files - st.Ffree
	w.peakBytes = max(w.peakBytes, used)
	w.peakInodes = max(w.peakInodes, inodes)
	if st.Ffree == 0 || st.Bfree < max(st.Blocks/64, 1) {
		w.full = true
	}
}

// now is how many bytes /work holds at this moment (0 without one).
func (w *workDisk) now() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.open {
		return 0
	}
	var st unix.Statfs_t
	if unix.Fstatfs(w.fd, &st) != nil {
		return 0
	}
	return (st.Blocks - st.Bfree) * uint64(st.Bsize)
}

// last takes a sample after the jail is gone and returns the peaks.
func (w *workDisk) last() (bytes, inodes uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sampleLocked()
	return w.peakBytes, w.peakInodes
}

// root returns the fd of the tmpfs's root, if init sent one.
func (w *workDisk) root() (int, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.fd, w.open
}

// close releases the tmpfs.
func (w *workDisk) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.open {
		w.sampleLocked()
		unix.Close(w.fd)
		w.open = false
	}
}
