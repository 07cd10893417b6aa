package vmtier

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/stockade/stockade/internal/lockfile"
	"github.com/stockade/stockade/rootfs"
)

//go:embed mkimage.sh
var mkimage string

// hostPython is the Python the guest's root gets: the host's, as the
// jail's host-derived root has it.
const hostPython = "/usr/bin/python3"

// Image is what a guest boots from: an initramfs that holds only its
// init (stockade) and the kernel modules init loads (virtio's PCI and
// block drivers, squashfs, overlayfs), and the guest's root, a squashfs
// the VMM attaches as a read-only disk and init mounts read-only as /.
type Image struct {
	Initrd string // the initramfs (newc cpio)
	Root   string // the root's squashfs
}

// The guest's image files in the cache: initrd-KEY.cpio and
// root-KEY.squashfs.
const (
	initrdPrefix, initrdSuffix = "initrd-", ".cpio"
	rootPrefix, rootSuffix     = "root-", ".squashfs"
)

// mksquashfs's options for the root: zstd at level 3 (a fifth of the
// build time of its default level 15 for a tenth more bytes; the kernel
// decompresses zstd built in), every file root's (the guest's root is
// owned by its root), no extended attributes.
var squashOptions = []string{"-comp", "zstd", "-Xcompression-level", "3", "-all-root", "-no-xattrs",
	"-noappend", "-quiet", "-no-progress"}

// EnsureImage returns the guest's image for this stockade binary, the
// host's Python and kernel's modules, building it into cache the first
// time (under a lock, so that concurrent runs build it once). Its files'
// names carry a key of what they are made of: the builder, the binary,
// the Python and the modules; a build for another key replaces older
// ones.
func EnsureImage(cache, binary, kernel string) (*Image, error) {
	python, err := filepath.EvalSymlinks(hostPython)
	if err != nil {
		return nil, fmt.Errorf("the host's Python: %w", err)
	}
	mods, err := kernelModules(kernel)
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	io.WriteString(h, mkimage)
	io.WriteString(h, strings.Join(squashOptions, " ")+"\x00")
	for _, f := range append([]string{binary, python}, mods...) {
		if err := hashFile(h, f); err != nil {
			return nil, err
		}
	}
	key := hex.EncodeToString(h.Sum(nil))[:16]
	img := &Image{
		Initrd: filepath.Join(cache, initrdPrefix+key+initrdSuffix),
		Root:   filepath.Join(cache, rootPrefix+key+rootSuffix),
	}
	if err := OwnCache(cache); err != nil {
		return nil, err
	}
	if img.built() {
		return img, nil
	}
	if _, err := exec.LookPath("mksquashfs"); err != nil {
		return nil, errors.New("no mksquashfs to build the guest's root (apt-get install squashfs-tools)")
	}
	unlock, err := lockfile.Acquire(filepath.Join(cache, ".build.lock"))
	if err != nil {
		return nil, err
	}
	defer unlock()
	if img.built() {
		return img, nil // built while we waited
	}
	tmp, err := os.MkdirTemp(cache, ".build-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)

	// The initramfs: init and the modules, in the order init loads them.
	ird := filepath.Join(tmp, "initrd")
	modDir := filepath.Join(ird, guestModules)
	if err := os.MkdirAll(modDir, 0o755); err != nil {
		return nil, err
	}
	for _, d := range []string{"dev", "newroot", filepath.Dir(guestInit), "usr/lib/x86_64-linux-gnu", "usr/lib64"} {
		if err := os.MkdirAll(filepath.Join(ird, d), 0o755); err != nil {
			return nil, err
		}
	}
	for _, l := range []string{"lib", "lib64"} {
		if err := os.Symlink("usr/"+l, filepath.Join(ird, l)); err != nil {
			return nil, err
		}
	}
	libs, err := sharedLibs(binary)
	if err != nil {
		return nil, err
	}
	for _, f := range append(libs, binary) {
		dst := filepath.Join(ird, f)
		if f == binary {
			dst = filepath.Join(ird, guestInit)
		}
		if err := copyFile(f, dst, 0o755); err != nil {
			return nil, fmt.Errorf("the guest's initramfs: %w", err)
		}
	}
	var order strings.Builder
	for _, m := range mods {
		if err := copyFile(m, filepath.Join(modDir, filepath.Base(m)), 0o644); err != nil {
			return nil, err
		}
		order.WriteString(filepath.Base(m) + "\n")
	}
	if err := os.WriteFile(filepath.Join(modDir, modulesLoad), []byte(order.String()), 0o644); err != nil {
		return nil, err
	}
	initrd := filepath.Join(tmp, "initrd.cpio")
	if err := packCpio(ird, initrd); err != nil {
		return nil, err
	}

	// The root: laid out by mkimage.sh, packed as a squashfs.
	root := filepath.Join(tmp, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		return nil, err
	}
	cmd := exec.Command("bash", "-s", "--", root, binary, python)
	cmd.Stdin = strings.NewReader(mkimage)
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("lay out the guest root: %w: %s", err, strings.TrimSpace(string(b)))
	}
	squash := filepath.Join(tmp, "root.squashfs")
	sq := exec.Command("mksquashfs", append([]string{root, squash}, squashOptions...)...)
	if b, err := sq.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("pack the guest root (mksquashfs): %w: %s", err, strings.TrimSpace(string(b)))
	}

	old, _ := filepath.Glob(filepath.Join(cache, initrdPrefix+"*"+initrdSuffix))
	oldRoots, _ := filepath.Glob(filepath.Join(cache, rootPrefix+"*"+rootSuffix))
	// The root first: an initrd is the sign that both are there.
	if err := os.Rename(squash, img.Root); err != nil {
		return nil, err
	}
	if err := os.Rename(initrd, img.Initrd); err != nil {
		return nil, err
	}
	for _, o := range append(old, oldRoots...) {
		if o != img.Initrd && o != img.Root {
			os.Remove(o)
		}
	}
	return img, nil
}

// The image of a prepared root (--rootfs DIR) in the cache:
// rootfs-DIRKEY-KEY.squashfs, DIRKEY naming DIR, KEY its tree.
const rootfsPrefix = "rootfs-"

// rootfsOptions are mksquashfs's for a prepared root: the tree as it is
// (owners, modes and extended attributes kept: the guest's jail checks
// and binds it as the jail tier does DIR).
var rootfsOptions = []string{"-comp", "zstd", "-Xcompression-level", "3", "-noappend", "-quiet", "-no-progress"}

// EnsureRootfsImage returns the squashfs of the prepared root dir (a
// root `stockade rootfs build` or `import` made), building it into cache
// the first time, under the cache's lock. Its name carries a key of dir's
// tree (rootfs.Fingerprint: every entry's metadata), so a changed tree
// gets a new image, which replaces dir's older ones. A tree is checked
// (rootfs.Check) before it is packed: one that cannot serve as a jail's
// root is refused on the host.
func EnsureRootfsImage(cache, dir string) (string, error) {
	if !filepath.IsAbs(dir) {
		return "", fmt.Errorf("rootfs %s: must be an absolute path", dir)
	}
	dir = filepath.Clean(dir)
	if same, err := sameFile(dir, "/"); err != nil {
		return "", fmt.Errorf("--rootfs %s: %w", dir, err)
	} else if same {
		return "", fmt.Errorf("--rootfs %s: the host's own root is not a prepared root", dir)
	}
	out, prefix, fp, err := rootfsImageName(cache, dir)
	if err != nil {
		return "", err
	}
	if err := OwnCache(cache); err != nil {
		return "", err
	}
	if _, err := os.Stat(out); err == nil {
		return out, rootfsImagePrivate(out)
	}
	if probs := rootfs.Check(dir); len(probs) > 0 {
		return "", fmt.Errorf("--rootfs %s cannot serve as a jail's root: %s (%d problems in all; `stockade rootfs check %s` lists them)", dir, probs[0], len(probs), dir)
	}
	if _, err := exec.LookPath("mksquashfs"); err != nil {
		return "", errors.New("no mksquashfs to build the root's image (apt-get install squashfs-tools)")
	}
	unlock, err := lockfile.Acquire(filepath.Join(cache, ".build.lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := os.Stat(out); err == nil {
		return out, rootfsImagePrivate(out) // built while we waited
	}
	tmp, err := os.MkdirTemp(cache, ".build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	squash := filepath.Join(tmp, "rootfs.squashfs")
	sq := exec.Command("mksquashfs", append([]string{dir, squash}, rootfsOptions...)...)
	if b, err := sq.CombinedOutput(); err != nil {
		return "", fmt.Errorf("pack --rootfs %s (mksquashfs): %w: %s", dir, err, strings.TrimSpace(string(b)))
	}
	// Packed from the tree the fingerprint named, or the key is a lie.
	if after, err := rootfs.Fingerprint(dir); err != nil || after != fp {
		return "", fmt.Errorf("--rootfs %s changed while it was packed; try again", dir)
	}
	if err := rootfsImagePrivate(squash); err != nil {
		return "", err
	}
	old, _ := filepath.Glob(filepath.Join(cache, prefix+"*"+rootSuffix))
	if err := os.Rename(squash, out); err != nil {
		return "", err
	}
	for _, o := range old {
		if o != out {
			os.Remove(o)
		}
	}
	return out, nil
}

// rootfsImagePrivate makes a --rootfs DIR's image readable by its owner
// alone: it holds DIR's every file, whatever their modes (a 0600 file of
// DIR's in an image others could read would be theirs with unsquashfs),
// and QEMU gets it as a descriptor opened as root (vmmOpened). An image
// built before is made so too.
func rootfsImagePrivate(f string) error {
	if err := os.Chmod(f, 0o600); err != nil {
		return fmt.Errorf("the --rootfs image %s: %w", f, err)
	}
	return nil
}

// rootfsImageName is the cache's file for dir's image as dir is now, the
// prefix of dir's images, and the fingerprint the name carries.
func rootfsImageName(cache, dir string) (out, prefix string, fp [sha256.Size]byte, err error) {
	if fp, err = rootfs.Fingerprint(dir); err != nil {
		return "", "", fp, err
	}
	d := sha256.Sum256([]byte(dir))
	h := sha256.New()
	h.Write(fp[:])
	io.WriteString(h, strings.Join(rootfsOptions, " "))
	prefix = rootfsPrefix + hex.EncodeToString(d[:])[:12] + "-"
	return filepath.Join(cache, prefix+hex.EncodeToString(h.Sum(nil))[:16]+rootSuffix), prefix, fp, nil
}

// OwnCache makes the cache directory (0755) if it is not there and checks
// that nobody else can put a file in it: a file there is trusted by its
// name alone (a kernel, an init, a root the guest boots and is handed
// the run's stdin and files). The directory must be this user's (or
// root's), a directory and not a symlink, writable by its owner alone,
// and so must every directory above it be, save a sticky one such as
// /tmp (whose other users cannot rename or remove what is this user's),
// on the path as given and as its symlinks resolve; each symlink on it
// must be root's or this user's. Another user's /tmp/stockade-vm-UID, or
// a --cache others can write, is refused, not used.
func OwnCache(cache string) error {
	cache, err := filepath.Abs(cache)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return err
	}
	if err := checkCacheChain(cache, cache); err != nil {
		return err
	}
	real, err := filepath.EvalSymlinks(cache)
	if err != nil {
		return fmt.Errorf("the vm cache %s: %w", cache, err)
	}
	if real == cache {
		return nil
	}
	return checkCacheChain(cache, real)
}

// checkCacheChain checks path and every directory above it for OwnCache.
func checkCacheChain(cache, path string) error {
	me := os.Geteuid()
	for d, leaf := path, true; ; d, leaf = filepath.Dir(d), false {
		var st unix.Stat_t
		if err := unix.Lstat(d, &st); err != nil {
			return fmt.Errorf("the vm cache %s: %w", cache, err)
		}
		owner := int(st.Uid) == me || st.Uid == 0
		sticky := !leaf && st.Mode&unix.S_ISVTX != 0
		symlink := st.Mode&unix.S_IFMT == unix.S_IFLNK
		switch {
		case symlink && !leaf && !owner:
			return fmt.Errorf("the vm cache %s: the symlink %s belongs to uid %d, who could point it elsewhere (set %s to a directory of uid %d's)", cache, d, st.Uid, CacheEnv, me)
		case symlink && !leaf:
		case st.Mode&unix.S_IFMT != unix.S_IFDIR:
			return fmt.Errorf("the vm cache %s: %s is not a directory (a symlink?): use a directory of uid %d's alone", cache, d, me)
		case leaf && int(st.Uid) != me:
			return fmt.Errorf("the vm cache %s belongs to uid %d, not to uid %d: its images would be another user's (remove it, or set %s)", cache, st.Uid, me, CacheEnv)
		case !owner:
			return fmt.Errorf("the vm cache %s: %s belongs to uid %d, who could replace the cache's images (set %s to a directory of uid %d's)", cache, d, st.Uid, CacheEnv, me)
		case st.Mode&0o022 != 0 && !sticky:
			return fmt.Errorf("the vm cache %s: %s is writable by others (mode %#o), who could replace its images (chmod go-w it, or set %s)", cache, d, st.Mode&0o7777, CacheEnv)
		}
		if d == "/" {
			return nil
		}
	}
}

func sameFile(a, b string) (bool, error) {
	fa, err := os.Stat(a)
	if err != nil {
		return false, err
	}
	fb, err := os.Stat(b)
	if err != nil {
		return false, err
	}
	return os.SameFile(fa, fb), nil
}

func (img *Image) built() bool {
	for _, f := range []string{img.Root, img.Initrd} {
		if _, err := os.Stat(f); err != nil {
			return false
		}
	}
	return true
}

// kernelModules is the modules the guest's init loads, in order: those
// modules/load beside the kernel names (vmtest/run --fetch-kernel puts
// them there), else overlay.ko beside it alone, else none (a kernel with
// what the guest needs built in).
func kernelModules(kernel string) ([]string, error) {
	dir := filepath.Join(filepath.Dir(kernel), "modules")
	f, err := os.Open(filepath.Join(dir, modulesLoad))
	if errors.Is(err, fs.ErrNotExist) {
		overlay := filepath.Join(filepath.Dir(kernel), "overlay.ko")
		if _, err := os.Stat(overlay); err == nil {
			return []string{overlay}, nil
		}
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	defer f.Close()
	var mods []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		name := strings.TrimSpace(s.Text())
		if name == "" {
			continue
		}
		if strings.ContainsRune(name, '/') || !strings.HasSuffix(name, ".ko") {
			return nil, fmt.Errorf("%s: %q is not a module's file name", f.Name(), name)
		}
		mods = append(mods, filepath.Join(dir, name))
	}
	return mods, s.Err()
}

// sharedLibs is the shared libraries ldd(1) names for binary (none for a
// static one), the dynamic loader among them.
func sharedLibs(binary string) ([]string, error) {
	out, err := exec.Command("ldd", binary).Output()
	if err != nil {
		if bytes.Contains(out, []byte("not a dynamic executable")) || errors.As(err, new(*exec.ExitError)) {
			return nil, nil
		}
		return nil, fmt.Errorf("ldd %s: %w", binary, err)
	}
	var libs []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			libs = append(libs, f[2])
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			libs = append(libs, f[0])
		}
	}
	return libs, nil
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// packCpio writes dir's tree to out as a newc cpio, every file root's.
func packCpio(dir, out string) error {
	pack := exec.Command("bash", "-c", `cd "$1" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet`, "pack", dir)
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	pack.Stdout = f
	var stderr strings.Builder
	pack.Stderr = &stderr
	err = pack.Run()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("pack the guest's initramfs (cpio): %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

func hashFile(h io.Writer, name string) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	io.WriteString(h, name+"\x00")
	_, err = io.Copy(h, f)
	return err
}
