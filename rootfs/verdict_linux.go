package rootfs

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Fingerprint digests the metadata of dir and of every entry below it that
// a jail would see (the top-level names Check skips are skipped): name,
// device, inode, type and mode, owner, size, link count, and the
// modification and change times to the nanosecond. Any change to the tree
// that Check could judge (a new, removed or renamed entry, a chmod, chown,
// a write to a file) moves a change time the kernel keeps and no
// unprivileged process can set, so a verdict stored under a fingerprint
// cannot be stale: a changed tree has another fingerprint.
func Fingerprint(dir string) ([sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return sum, fmt.Errorf("fingerprint %s: %w", dir, err)
	}
	h := sha256.New()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return sum, fmt.Errorf("fingerprint %s: %w", dir, err)
	}
	record(h, ".", &st)
	err = fingerprintDir(h, fd, "", make([]byte, 32<<10))
	unix.Close(fd)
	if err != nil {
		return sum, fmt.Errorf("fingerprint %s: %w", dir, err)
	}
	copy(sum[:], h.Sum(nil))
	return sum, nil
}

// fingerprintDir adds every entry of the open directory fd (rel is its
// path below the root) and recurses into subdirectories, never following
// a symlink. The order of entries is the directory's own: a reordering
// changes the fingerprint, which only costs a full check.
func fingerprintDir(h hash.Hash, fd int, rel string, buf []byte) error {
	var names []string
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		if n == 0 {
			break
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
	for _, name := range names {
		if rel == "" && checkSkip[name] {
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("%s/%s: %w", rel, name, err)
		}
		p := rel + "/" + name
		record(h, p, &st)
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue
		}
		sub, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		err = fingerprintDir(h, sub, p, buf)
		unix.Close(sub)
		if err != nil {
			return err
		}
	}
	return nil
}

func record(h hash.Hash, p string, st *unix.Stat_t) {
	var b [8 * 11]byte
	for i, v := range []uint64{uint64(st.Dev), st.Ino, uint64(st.Mode), uint64(st.Uid), uint64(st.Gid),
		uint64(st.Size), uint64(st.Nlink), uint64(st.Mtim.Sec), uint64(st.Mtim.Nsec), uint64(st.Ctim.Sec), uint64(st.Ctim.Nsec)} {
		binary.LittleEndian.PutUint64(b[i*8:], v)
	}
	h.Write([]byte(p))
	h.Write([]byte{0})
	h.Write(b[:])
}

// verdictFit is what a stored verdict says: the tree passed Check.
var verdictFit = []byte("fit\n")

// CheckCached is Check with a fast path: a tree that passed once, and has
// the same Fingerprint now, passes without Check's ELF and library
// resolution. Only passing verdicts are stored, one file per fingerprint
// in cacheDir (which must belong to the caller and be writable only by
// it: whoever can write there can vouch for a tree). cacheDir "" checks
// in full every time. A problem with the cache itself is never a verdict:
// it falls back to the full check.
func CheckCached(dir, cacheDir string) []Problem {
	if cacheDir == "" {
		return Check(dir)
	}
	sum, err := Fingerprint(dir)
	if err != nil {
		return Check(dir)
	}
	name := filepath.Join(cacheDir, hex.EncodeToString(sum[:]))
	if b, err := os.ReadFile(name); err == nil && bytes.Equal(b, verdictFit) {
		return nil
	}
	probs := Check(dir)
	if len(probs) > 0 {
		return probs
	}
	// The tree may have changed while Check ran; store only under the
	// fingerprint it still has, which is then the one Check judged.
	if after, err := Fingerprint(dir); err != nil || after != sum {
		return nil
	}
	if err := os.Mkdir(cacheDir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil
	}
	tmp, err := os.CreateTemp(cacheDir, ".verdict-")
	if err != nil {
		return nil
	}
	_, werr := tmp.Write(verdictFit)
	cerr := tmp.Close()
	if werr != nil || cerr != nil || os.Rename(tmp.Name(), name) != nil {
		os.Remove(tmp.Name())
	}
	return nil
}
