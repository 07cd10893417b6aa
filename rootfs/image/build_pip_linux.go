package image

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
)

// pipRequirement is what --pip accepts besides a wheel file: a PyPI name,
// optionally pinned (numpy, requests==2.31.0). Nothing that pip would read
// as an option, a URL or a requirements file.
var pipRequirement = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*(==[A-Za-z0-9.+!_-]+)?$`)
})

// checkPip refuses a --pip entry that is neither a requirement nor an
// absolute path to a wheel file on the host.
func checkPip(p string) error {
	if strings.HasSuffix(p, ".whl") {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("pip wheel %q: give an absolute path", p)
		}
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("pip wheel %s: %w", p, err)
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("pip wheel %s: not a regular file", p)
		}
		return nil
	}
	if !pipRequirement().MatchString(p) {
		return fmt.Errorf("pip package %q is not a package name (NAME or NAME==VERSION) or a .whl file", p)
	}
	return nil
}

// wheelDir is where the wheels given as files are copied inside the root
// being built; finish empties /tmp afterwards.
const wheelDir = "/tmp/stockade-wheels"

// pipArgs is the pip command run in the new root: binary wheels only, so
// that no package's setup.py runs (as root, at build time); into
// /usr/local, which Debian's python3 searches and pip's Debian patch uses
// for root; past PEP 668's marker, which guards the system's packages of a
// running machine, not a root being built.
func pipArgs(pkgs []string) []string {
	args := []string{"/usr/bin/python3", "-m", "pip", "install", "--no-cache-dir", "--break-system-packages",
		"--root-user-action=ignore", "--only-binary=:all:", "--disable-pip-version-check", "--no-warn-script-location"}
	local := true
	for _, p := range pkgs {
		if strings.HasSuffix(p, ".whl") {
			args = append(args, wheelDir+"/"+filepath.Base(p))
		} else {
			local = false
			args = append(args, p)
		}
	}
	if local {
		// Wheels from the host only: nothing to fetch, so no index either.
		args = append(args[:4], append([]string{"--no-index"}, args[4:]...)...)
	}
	return args
}

// installPip runs pip inside target (chroot) to install pkgs, after copying
// the wheel files among them into the root.
func installPip(ctx context.Context, target string, pkgs []string, prog *progress) error {
	if len(pkgs) == 0 {
		return nil
	}
	for _, p := range pkgs {
		if !strings.HasSuffix(p, ".whl") {
			continue
		}
		if err := copyWheel(p, filepath.Join(target, wheelDir)); err != nil {
			return err
		}
	}
	prog.stage("pip: installing %s", strings.Join(pkgs, ", "))
	args := pipArgs(pkgs)
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Env = append(debootstrapEnv(), "HOME=/tmp", "PYTHONDONTWRITEBYTECODE=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: target, Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Dir = "/"
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("pip install %s: %w; its last lines:\n%s", strings.Join(pkgs, " "), err, strings.Join(lastLines(string(out), 15), "\n"))
	}
	return nil
}

func copyWheel(src, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("pip wheel %s: %w", src, err)
	}
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("pip wheel %s: %w", src, err)
	}
	defer in.Close()
	out, err := os.OpenFile(filepath.Join(dir, filepath.Base(src)), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("pip wheel %s: %w", src, err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("pip wheel %s: %w", src, err)
	}
	return out.Close()
}
