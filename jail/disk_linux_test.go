package jail

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stockade/stockade/internal/testenv"
)

// The /work attacks run against a 4 MiB bound with RLIMIT_FSIZE lifted,
// so the bound is the only thing that can stop them, on a fresh /work and
// on a --workdir (an overlay whose writes land in a tmpfs of that size and
// are copied back after the run). Unbounded (a host directory), each of
// them filled the host disk: 18 GiB written, 30 GiB fallocated, 53k
// inodes in one 10 s run.
//
// 4 MiB (1024 inodes) keeps the --workdir copy-back of an inode flood
// short under make vmtest's emulation.
const attackWorkSize = 4 << 20

// diskAttack runs code on both kinds of /work and hands each result to
// check after the checks every attack shares.
func diskAttack(t *testing.T, code string, check func(t *testing.T, r *Result)) {
	t.Helper()
	testenv.NeedJail(t)
	for _, kind := range []string{"fresh", "workdir"} {
		t.Run(kind, func(t *testing.T) {
			s := py(code)
			s.WorkSize = attackWorkSize
			s.Rlimits.FileSize = math.MaxUint64
			if kind == "workdir" {
				s.Workdir = ownedTempDir(t)
			}
			r := mustRun(t, s)
			if r.Verdict != VerdictDisk {
				t.Errorf("verdict %q, want %q (%+v)", r.Verdict, VerdictDisk, r)
			}
			if r.WorkPeakBytes > attackWorkSize {
				t.Errorf("/work held %d bytes, more than its %d", r.WorkPeakBytes, attackWorkSize)
			}
			if r.WorkPeakInodes > uint64(WorkInodes(attackWorkSize)) {
				t.Errorf("/work held %d inodes, more than its %d", r.WorkPeakInodes, WorkInodes(attackWorkSize))
			}
			if !strings.Contains(r.Stdout, "ENOSPC") {
				t.Errorf("the jail never saw ENOSPC: stdout %q stderr %q", r.Stdout, r.Stderr)
			}
			if left := snapshot(t).runDirs; len(left) > 0 {
				t.Errorf("run directories left: %v", left)
			}
			if s.Workdir != "" {
				// Copied back: no more than the bound held (holes stay
				// holes, hard links stay links).
				if used, files := diskUse(t, s.Workdir); used > attackWorkSize+1<<20 || files > WorkInodes(attackWorkSize) {
					t.Errorf("--workdir holds %d bytes in %d files after the run, more than its bound", used, files)
				}
			}
			if check != nil {
				check(t, r)
			}
		})
	}
}

// ownedTempDir is a --workdir the jail may use: reachable, and owned by an
// unprivileged user when the test runs as root.
func ownedTempDir(t *testing.T) string {
	dir := reachableTempDir(t)
	if os.Geteuid() == 0 {
		if err := os.Chown(dir, 4242, 4242); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// diskUse is the disk space (allocated blocks of each inode once, not
// apparent sizes) and the number of names below dir.
func diskUse(t *testing.T, dir string) (int64, int64) {
	var used, files int64
	seen := map[uint64]bool{}
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		files++
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && !seen[st.Ino] {
			seen[st.Ino] = true
			used += st.Blocks * 512
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return used, files - 1
}

// enospc is the Python the attacks share: run f until it fails, then say
// how it failed.
const enospc = `
import errno, os
def until_full(f):
    n = 0
    try:
        while True:
            f(n); n += 1
    except OSError as e:
        print(errno.errorcode.get(e.errno, e.errno), n)
    return n
`

func TestAttackDiskFillByWrite(t *testing.T) {
	diskAttack(t, enospc+`
fd = os.open("/work/fill", os.O_WRONLY | os.O_CREAT)
until_full(lambda n: os.write(fd, b"x" * (1 << 20)))
os.fsync(fd)
`, func(t *testing.T, r *Result) {
		// Every byte written is a tmpfs page charged to the run's cgroup.
		if r.WorkPeakBytes < attackWorkSize*63/64 || r.PeakMemoryBytes < r.WorkPeakBytes {
			t.Errorf("work_peak_bytes %d, peak memory %d: want /work full and charged to the run", r.WorkPeakBytes, r.PeakMemoryBytes)
		}
	})
}

func TestAttackDiskFillByFallocate(t *testing.T) {
	diskAttack(t, enospc+`
fd = os.open("/work/big", os.O_WRONLY | os.O_CREAT)
try:
    os.posix_fallocate(fd, 0, 30 << 30)
    print("RESERVED 30 GiB")
except OSError as e:
    print("one big fallocate:", errno.errorcode[e.errno])
until_full(lambda n: os.posix_fallocate(fd, n << 20, 1 << 20))
`, func(t *testing.T, r *Result) {
		if strings.Contains(r.Stdout, "RESERVED") {
			t.Errorf("a 30 GiB fallocate succeeded: %q", r.Stdout)
		}
	})
}

func TestAttackDiskInodeFlood(t *testing.T) {
	diskAttack(t, enospc+`
until_full(lambda n: os.close(os.open("/work/f%d" % n, os.O_WRONLY | os.O_CREAT)))
`, func(t *testing.T, r *Result) {
		if r.WorkPeakInodes != uint64(WorkInodes(attackWorkSize)) {
			t.Errorf("work_peak_inodes %d, want the limit %d", r.WorkPeakInodes, WorkInodes(attackWorkSize))
		}
	})
}

// A sparse file costs nothing until its holes are written; each page
// written in it then counts, wherever it lies in the terabyte. Copied back
// to a --workdir, it must stay sparse.
func TestAttackDiskSparseFile(t *testing.T) {
	diskAttack(t, enospc+`
fd = os.open("/work/sparse", os.O_WRONLY | os.O_CREAT)
os.ftruncate(fd, 1 << 40)
until_full(lambda n: os.pwrite(fd, b"x", n << 20))
print("apparent size", os.fstat(fd).st_size)
`, func(t *testing.T, r *Result) {
		if !strings.Contains(r.Stdout, "apparent size 1099511627776") {
			t.Errorf("stdout %q", r.Stdout)
		}
	})
}

// Hard links have no data of their own, but tmpfs counts each as an inode
// (each is a dentry of kernel memory). Copied back, a thousand links to a
// 1 MiB file must stay one file's data.
func TestAttackDiskHardLinks(t *testing.T) {
	diskAttack(t, enospc+`
open("/work/target", "wb").write(b"x" * (1 << 20))
until_full(lambda n: os.link("/work/target", "/work/l%d" % n))
`, func(t *testing.T, r *Result) {
		if r.WorkPeakInodes != uint64(WorkInodes(attackWorkSize)) {
			t.Errorf("work_peak_inodes %d, want the limit %d", r.WorkPeakInodes, WorkInodes(attackWorkSize))
		}
	})
}

// A run that writes less than its /work is not a disk verdict, and says
// what it wrote.
func TestWorkBytesWithoutFilling(t *testing.T) {
	testenv.NeedJail(t)
	s := py(`open("/work/f", "wb").write(b"x" * (3 << 20))`)
	s.WorkSize = 16 << 20
	r := mustRun(t, s)
	if r.Verdict != VerdictOK || r.WorkPeakBytes < 3<<20 || r.WorkPeakBytes > 4<<20 || r.WorkPeakInodes != 2 {
		t.Fatalf("%+v", r)
	}
}

// /work's pages are the run's memory: with --memory below --work-size the
// memory limit ends a fill first, and the host pays nothing.
func TestAttackDiskFillBeyondMemoryLimit(t *testing.T) {
	testenv.NeedJail(t)
	s := py(enospc + `
fd = os.open("/work/fill", os.O_WRONLY | os.O_CREAT)
until_full(lambda n: os.write(fd, b"x" * (1 << 20)))
`)
	s.Rlimits.FileSize = math.MaxUint64
	s.Cgroup.MemoryMax = 48 << 20
	r := mustRun(t, s)
	if r.Verdict != VerdictMemory || r.WorkPeakBytes > 48<<20 {
		t.Fatalf("verdict %q, work_peak_bytes %d: want the memory limit to stop the fill (%+v)", r.Verdict, r.WorkPeakBytes, r)
	}
}
