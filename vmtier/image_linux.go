package vmtier

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/stockade/stockade/internal/lockfile"
)

//go:embed mkimage.sh
var mkimage string

// hostPython is the Python the guest's root gets: the host's, as the
// jail's host-derived root has it.
const hostPython = "/usr/bin/python3"

// EnsureImage returns the guest's initramfs for this stockade binary and
// the host's Python, building it into cache the first time (under a lock,
// so that concurrent runs build it once). Its name carries a key of what
// it is made of: the builder, the binary, the Python and the kernel's
// overlayfs module; a build for another key replaces older ones.
func EnsureImage(cache, binary, kernel string) (string, error) {
	python, err := filepath.EvalSymlinks(hostPython)
	if err != nil {
		return "", fmt.Errorf("the host's Python: %w", err)
	}
	overlay := filepath.Join(filepath.Dir(kernel), "overlay.ko")
	if _, err := os.Stat(overlay); err != nil {
		overlay = ""
	}
	h := sha256.New()
	io.WriteString(h, mkimage)
	for _, f := range []string{binary, python, overlay} {
		if f == "" {
			continue
		}
		if err := hashFile(h, f); err != nil {
			return "", err
		}
	}
	key := hex.EncodeToString(h.Sum(nil))[:16]
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", err
	}
	out := filepath.Join(cache, "initrd-"+key+".cpio")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	unlock, err := lockfile.Acquire(filepath.Join(cache, ".build.lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := os.Stat(out); err == nil {
		return out, nil // built while we waited
	}
	tmp, err := os.MkdirTemp(cache, ".build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	root := filepath.Join(tmp, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		return "", err
	}
	cmd := exec.Command("bash", "-s", "--", root, binary, overlay, python)
	cmd.Stdin = strings.NewReader(mkimage)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("lay out the guest root: %w: %s", err, strings.TrimSpace(string(b)))
	}
	// newc, every file root's: the guest's root is owned by its root.
	pack := exec.Command("bash", "-c", `cd "$1" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet`, "pack", root)
	f, err := os.Create(filepath.Join(tmp, "initrd.cpio"))
	if err != nil {
		return "", err
	}
	pack.Stdout = f
	var stderr strings.Builder
	pack.Stderr = &stderr
	err = pack.Run()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("pack the guest root (cpio): %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	old, _ := filepath.Glob(filepath.Join(cache, "initrd-*.cpio"))
	if err := os.Rename(f.Name(), out); err != nil {
		return "", err
	}
	for _, o := range old {
		os.Remove(o)
	}
	return out, nil
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
