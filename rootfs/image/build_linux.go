package image

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/stockade/stockade/internal/hostenv"
	"github.com/stockade/stockade/internal/lockfile"
	"golang.org/x/sys/unix"
)

// BuildOptions says what Build bootstraps.
type BuildOptions struct {
	Suite    string   // Debian suite; default DefaultSuite
	Packages []string // installed besides python3 (debootstrap --include)
	// Pip are PyPI packages (NAME or NAME==VERSION, binary wheels only) or
	// absolute paths of wheel files on the host, installed with pip into
	// the root's /usr/local after debootstrap; python3-pip comes with them.
	Pip      []string
	Mirror   string    // default HostMirror(Suite)
	Progress io.Writer // stage lines with elapsed time; nil for none
}

// DefaultSuite is the Debian release Build installs by default.
const DefaultSuite = "bookworm"

// stampFile records in a built root how it was built; EnsureBuilt reads it.
const stampFile = "etc/stockade-build"

var (
	// Compiled on first use, not by every start of stockade (issue 20).
	suiteName   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z][a-z0-9-]*$`) })
	packageName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+$`) }) // Debian policy 5.6.1
)

// Build bootstraps a minimal Debian (debootstrap --variant=minbase) with
// python3 and opts.Packages into dir, then trims it for a jail: no apt
// caches or lists, docs, manuals or locales but C.UTF-8; a generated
// /etc/passwd and /etc/group whose only user besides root and nobody is the
// jail's sandbox (1000:1000); empty /work, /tmp, /proc and /dev; no setuid,
// setgid or file-capability bits. dir must not exist or be empty. The work
// happens in a sibling directory renamed to dir at the end, so dir never
// holds a half-made root; on failure nothing is left behind. Build needs
// root, as debootstrap does.
func Build(ctx context.Context, dir string, opts BuildOptions) error {
	opts, err := opts.withDefaults()
	if err != nil {
		return err
	}
	debootstrap, err := exec.LookPath("debootstrap")
	if err != nil {
		return fmt.Errorf("debootstrap not found (install it: apt-get install debootstrap): %w", err)
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("rootfs build needs root: debootstrap chroots and installs files owned by root")
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return err
	}
	if err := requireEmpty(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("build %s: %w", dir, err)
	}
	work, err := os.MkdirTemp(filepath.Dir(dir), "."+filepath.Base(dir)+".building-")
	if err != nil {
		return fmt.Errorf("build %s: %w", dir, err)
	}
	ok := false
	defer func() {
		if !ok {
			discard(work)
		}
	}()

	prog := newProgress(opts.Progress)
	defer prog.done()
	target := filepath.Join(work, "root")
	prog.stage("debootstrap: %s (minbase) with %s from %s", opts.Suite, strings.Join(opts.include(), ", "), opts.Mirror)
	if err := runDebootstrap(ctx, debootstrap, target, opts, prog); err != nil {
		return fmt.Errorf("build %s: %w", dir, err)
	}
	if err := installPip(ctx, target, opts.Pip, prog); err != nil {
		unmountBelow(target)
		return fmt.Errorf("build %s: %w", dir, err)
	}
	// debootstrap mounts /proc and /sys in the target in its own mount
	// namespace; should anything still be mounted below the target,
	// finish walks the tree and must not walk into the host's.
	if err := unmountBelow(target); err != nil {
		return fmt.Errorf("build %s: %w", dir, err)
	}
	prog.stage("trimming and writing the jail's /etc/passwd and /etc/group")
	if err := finish(target); err != nil {
		return fmt.Errorf("build %s: %w", dir, err)
	}
	if err := writeStamp(target, opts); err != nil {
		return fmt.Errorf("build %s: %w", dir, err)
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("build %s: %w", dir, err) // requireEmpty said it was empty
	}
	if err := os.Rename(target, dir); err != nil {
		return fmt.Errorf("build %s: %w", dir, err)
	}
	ok = true
	os.Remove(work)
	prog.stage("done: %s in %s", formatBytes(treeSize(dir)), dir)
	return nil
}

func (o BuildOptions) withDefaults() (BuildOptions, error) {
	if o.Suite == "" {
		o.Suite = DefaultSuite
	}
	if !suiteName().MatchString(o.Suite) {
		return o, fmt.Errorf("suite %q is not a Debian suite name", o.Suite)
	}
	for _, p := range o.Packages {
		if !packageName().MatchString(p) {
			return o, fmt.Errorf("package %q is not a Debian package name", p)
		}
	}
	for _, p := range o.Pip {
		if err := checkPip(p); err != nil {
			return o, err
		}
	}
	if o.Mirror == "" {
		o.Mirror = HostMirror(o.Suite)
	}
	if !validMirror(o.Mirror) {
		return o, fmt.Errorf("mirror %q is not an http, https or file URL", o.Mirror)
	}
	return o, nil
}

// include is the --include list: python3 first, then the asked packages.
func (o BuildOptions) include() []string {
	pkgs := []string{"python3"}
	if len(o.Pip) > 0 {
		pkgs = append(pkgs, "python3-pip")
	}
	for _, p := range o.Packages {
		if !slices.Contains(pkgs, p) {
			pkgs = append(pkgs, p)
		}
	}
	return pkgs
}

func runDebootstrap(ctx context.Context, debootstrap, target string, opts BuildOptions, prog *progress) error {
	args := []string{"--variant=minbase", "--include=" + strings.Join(opts.include(), ","), opts.Suite, target, opts.Mirror}
	cmd := exec.CommandContext(ctx, debootstrap, args...)
	cmd.Env = debootstrapEnv()
	// Its own process group, so that cancelling kills the dpkg and
	// maintainer scripts it runs in the chroot too, not only the script.
	// Its own mount namespace (Go makes the copy's mounts private), so
	// that the /proc and /sys it mounts in the target go with its last
	// process: a stockade killed with SIGKILL mid-build leaves no proc
	// mount in the host's table, under a directory the user would then
	// try to remove.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Unshareflags: syscall.CLONE_NEWNS}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start debootstrap: %w", err)
	}
	var tail []string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		tail = append(tail, line)
		if len(tail) > 15 {
			tail = tail[1:]
		}
		msg, perPackage := debootstrapLine(line)
		if perPackage {
			prog.chatter("debootstrap: %s", msg)
		} else {
			prog.stage("debootstrap: %s", msg)
		}
	}
	if err := cmd.Wait(); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("debootstrap: %w", ctx.Err())
		}
		if log, _ := os.ReadFile(filepath.Join(target, "debootstrap", "debootstrap.log")); len(log) > 0 {
			tail = lastLines(string(log), 15)
		}
		return fmt.Errorf("debootstrap %s: %w; its last lines:\n%s", strings.Join(args, " "), err, strings.Join(tail, "\n"))
	}
	return nil
}

// debootstrapEnv is a clean environment: the host's locale or DEBIAN_*
// settings must not change what gets installed, but a proxy the network
// needs must reach wget.
func debootstrapEnv() []string {
	env := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8", "DEBIAN_FRONTEND=noninteractive"}
	for _, k := range []string{"http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// debootstrapLine strips debootstrap's "I: " and says whether the line is
// one of the per-package ones ("Retrieving libc6 2.36-9", "Extracting
// dash...") that a terminal shows only in passing.
func debootstrapLine(line string) (msg string, perPackage bool) {
	msg, info := strings.CutPrefix(line, "I: ")
	verb, rest, _ := strings.Cut(msg, " ")
	switch verb {
	case "Retrieving", "Validating", "Extracting", "Unpacking", "Configuring":
		n := len(strings.Fields(rest))
		meta := slices.Contains([]string{"InRelease", "Release", "Packages"}, strings.TrimSpace(rest))
		return msg, info && (n == 1 || n == 2) && !meta
	}
	return msg, false
}

func lastLines(s string, n int) []string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines
}

// requireEmpty accepts a missing dir or an empty directory.
func requireEmpty(dir string) error {
	f, err := os.Open(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.IsDir() {
		return fmt.Errorf("%s exists and is not a directory", dir)
	}
	if names, _ := f.Readdirnames(1); len(names) > 0 {
		return fmt.Errorf("%s is not empty", dir)
	}
	return nil
}

// unmountBelow detaches every mount below dir and fails if any remains.
func unmountBelow(dir string) error {
	mps, err := hostenv.MountsBelow(dir)
	if err != nil {
		return err
	}
	for _, mp := range mps {
		if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("unmount %s: %w", mp, err)
		}
	}
	if left, err := hostenv.MountsBelow(dir); err != nil || len(left) > 0 {
		return fmt.Errorf("mounts left below %s: %v %v", dir, left, err)
	}
	return nil
}

// discard removes a failed build's work directory, but only once nothing is
// mounted in it: RemoveAll through a bind of the host's /dev or /sys would
// delete the host's files.
func discard(work string) {
	if unmountBelow(work) == nil {
		os.RemoveAll(work)
	}
}

func writeStamp(root string, opts BuildOptions) error {
	stamp := fmt.Sprintf("# how stockade rootfs build made this root\nsuite=%s\npackages=%s\npip=%s\nmirror=%s\nbuilt=%s\n",
		opts.Suite, strings.Join(opts.include(), ","), strings.Join(opts.Pip, ","), opts.Mirror, time.Now().UTC().Format(time.RFC3339))
	return os.WriteFile(filepath.Join(root, stampFile), []byte(stamp), 0o644)
}

// readStamp returns the suite and packages a built root records.
func readStamp(root string) (suite, packages string, err error) {
	data, err := os.ReadFile(filepath.Join(root, stampFile))
	if err != nil {
		return "", "", err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "suite="); ok {
			suite = v
		}
		if v, ok := strings.CutPrefix(line, "packages="); ok {
			packages = v
		}
	}
	return suite, packages, nil
}

// EnsureBuilt builds dir with Build unless it already holds a root Build
// made with the same suite and packages, and says whether it built. It
// serializes on a lock file beside dir, so that test binaries running in
// parallel (`go test ./...`) share one build instead of racing; only this
// user can open it (lockfile), so no other user can hold it and keep the
// build waiting.
func EnsureBuilt(ctx context.Context, dir string, opts BuildOptions) (built bool, err error) {
	opts, err = opts.withDefaults()
	if err != nil {
		return false, err
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return false, err
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return false, err
	}
	unlock, err := lockfile.Acquire(dir + ".lock")
	if err != nil {
		return false, fmt.Errorf("root image %s: %w", dir, err)
	}
	defer unlock()
	suite, pkgs, err := readStamp(dir)
	switch {
	case err == nil && suite == opts.Suite && pkgs == strings.Join(opts.include(), ","):
		return false, nil
	case err == nil:
		return false, fmt.Errorf("%s holds a %s root with %s, not %s with %s: remove it to rebuild",
			dir, suite, pkgs, opts.Suite, strings.Join(opts.include(), ","))
	}
	if err := Build(ctx, dir, opts); err != nil {
		return false, err
	}
	return true, nil
}

func treeSize(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// formatBytes writes n for people: "261.4 MiB".
func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
