package image

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/testenv"
	"github.com/stockade/stockade/rootfs"
	"golang.org/x/sys/unix"
)

// debootstrapTree writes a tree shaped like what debootstrap leaves, with
// something for every trimming rule, and returns it and a directory outside
// it that a symlink in it points at.
func debootstrapTree(t *testing.T) (root, outside string) {
	t.Helper()
	base := t.TempDir()
	root, outside = filepath.Join(base, "root"), filepath.Join(base, "outside")
	files := map[string]string{
		"usr/bin/python3.11":                                               "elf",
		"usr/bin/su":                                                       "su",
		"usr/bin/ping":                                                     "ping",
		"usr/lib/python3.11/json/__init__.py":                              "json",
		"usr/share/doc/python3/copyright":                                  "doc",
		"usr/share/man/man1/python3.1.gz":                                  "man",
		"usr/share/locale/de/LC_MESSAGES/apt.mo":                           "mo",
		"usr/share/locale/locale.alias":                                    "alias",
		"usr/lib/locale/C.utf8/LC_CTYPE":                                   "ctype",
		"usr/lib/locale/en_US.utf8/LC_CTYPE":                               "ctype",
		"var/cache/apt/archives/python3_3.11.2-1_amd64.deb":                "deb",
		"var/cache/debconf/config.dat":                                     "dat",
		"var/lib/apt/lists/deb.debian.org_debian_dists_bookworm_InRelease": "list",
		"var/lib/dpkg/status":                                              "status",
		"var/log/dpkg.log":                                                 "log",
		"dev/null":                                                         "stand-in",
		"proc/stale":                                                       "x",
		"tmp/junk":                                                         "x",
		"etc/passwd":                                                       "root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1::/usr/sbin:/usr/sbin/nologin\n",
		"etc/group":                                                        "root:x:0:\ndaemon:x:1:\n",
		"etc/shadow":                                                       "root:$6$hash:19000:0:99999:7:::\n",
	}
	for name, content := range files {
		must(t, os.MkdirAll(filepath.Join(root, filepath.Dir(name)), 0o755))
		must(t, os.WriteFile(filepath.Join(root, name), []byte(content), 0o644))
	}
	must(t, os.Chmod(filepath.Join(root, "usr/bin/su"), 0o755|os.ModeSetuid))
	must(t, os.MkdirAll(outside, 0o755))
	must(t, os.WriteFile(filepath.Join(outside, "precious"), []byte("keep"), 0o644))
	// A tree whose usr/share/info is a symlink out: trimming must remove
	// nothing through it.
	must(t, os.Symlink(outside, filepath.Join(root, "usr/share/info")))
	if os.Geteuid() == 0 {
		must(t, unix.Mknod(filepath.Join(root, "dev/zero"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 5))))
		// A file capability (cap_net_raw+ep), as iputils ships ping.
		capNetRaw := []byte{0, 0, 0, 2, 0, 0x20, 0, 0, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
		must(t, unix.Setxattr(filepath.Join(root, "usr/bin/ping"), "security.capability", capNetRaw, 0))
	}
	return root, outside
}

func TestFinishTrimsAndWritesIdentity(t *testing.T) {
	root, outside := debootstrapTree(t)
	if err := finish(root); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"dev/ dir 0755",
		"etc/ dir 0755",
		"etc/group file 0644 \"root:x:0:\\nnogroup:x:65534:\\nsandbox:x:1000:\\n\"",
		"etc/gshadow file 0600 \"root:*::\\nnogroup:*::\\nsandbox:*::\\n\"",
		"etc/passwd file 0644 \"root:x:0:0:root:/root:/usr/sbin/nologin\\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\\nsandbox:x:1000:1000:stockade jail user:/work:/bin/sh\\n\"",
		"etc/shadow file 0600 \"root:*:19000:0:99999:7:::\\nnobody:*:19000:0:99999:7:::\\nsandbox:*:19000:0:99999:7:::\\n\"",
		"proc/ dir 0555",
		"tmp/ dir 1777",
		"usr/ dir 0755",
		"usr/bin/ dir 0755",
		"usr/bin/ping file 0644 \"ping\"",
		"usr/bin/python3.11 file 0644 \"elf\"",
		"usr/bin/su file 0755 \"su\"",
		"usr/lib/ dir 0755",
		"usr/lib/locale/ dir 0755",
		"usr/lib/locale/C.utf8/ dir 0755",
		"usr/lib/locale/C.utf8/LC_CTYPE file 0644 \"ctype\"",
		"usr/lib/python3.11/ dir 0755",
		"usr/lib/python3.11/json/ dir 0755",
		"usr/lib/python3.11/json/__init__.py file 0644 \"json\"",
		"usr/share/ dir 0755",
		"usr/share/doc/ dir 0755",
		"usr/share/info symlink -> OUTSIDE",
		"usr/share/locale/ dir 0755",
		"usr/share/locale/locale.alias file 0644 \"alias\"",
		"usr/share/man/ dir 0755",
		"var/ dir 0755",
		"var/cache/ dir 0755",
		"var/lib/ dir 0755",
		"var/lib/apt/ dir 0755",
		"var/lib/apt/lists/ dir 0755",
		"var/lib/dpkg/ dir 0755",
		"var/lib/dpkg/status file 0644 \"status\"",
		"var/log/ dir 0755",
		"work/ dir 0755",
	}
	if got := listTree(t, root, outside); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("tree:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if data, err := os.ReadFile(filepath.Join(outside, "precious")); err != nil || string(data) != "keep" {
		t.Errorf("trimming reached through a symlink: %q %v", data, err)
	}
	if os.Geteuid() == 0 {
		if _, err := unix.Getxattr(filepath.Join(root, "usr/bin/ping"), "security.capability", make([]byte, 64)); !errors.Is(err, unix.ENODATA) {
			t.Errorf("file capability kept: %v", err)
		}
	}
}

func TestFinishReplacesPlantedSymlinks(t *testing.T) {
	root, outside := debootstrapTree(t)
	must(t, os.Remove(filepath.Join(root, "etc/passwd")))
	must(t, os.Symlink(filepath.Join(outside, "precious"), filepath.Join(root, "etc/passwd")))
	must(t, os.RemoveAll(filepath.Join(root, "tmp")))
	must(t, os.Symlink(outside, filepath.Join(root, "tmp")))
	if err := finish(root); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(filepath.Join(outside, "precious")); string(data) != "keep" {
		t.Errorf("writing /etc/passwd went through a symlink: %q", data)
	}
	if fi, err := os.Lstat(filepath.Join(root, "tmp")); err != nil || !fi.IsDir() {
		t.Errorf("tmp is not a real directory: %v %v", fi, err)
	}
}

func TestBuildOptions(t *testing.T) {
	tests := []struct {
		opts BuildOptions
		want string
	}{
		{BuildOptions{Suite: "Bookworm"}, `suite "Bookworm" is not a Debian suite name`},
		{BuildOptions{Packages: []string{"--no-check-gpg"}}, `package "--no-check-gpg" is not a Debian package name`},
		{BuildOptions{Packages: []string{"python3-numpy,evil"}}, `package "python3-numpy,evil" is not a Debian package name`},
		{BuildOptions{Mirror: "ftp://ftp.debian.org/debian"}, `mirror "ftp://ftp.debian.org/debian" is not an http, https or file URL`},
	}
	for _, tt := range tests {
		if _, err := tt.opts.withDefaults(); err == nil || err.Error() != tt.want {
			t.Errorf("%+v: %v, want %q", tt.opts, err, tt.want)
		}
	}
	o, err := BuildOptions{Packages: []string{"python3-numpy", "python3", "python3-numpy"}, Mirror: "http://m/debian"}.withDefaults()
	if err != nil || o.Suite != "bookworm" || strings.Join(o.include(), ",") != "python3,python3-numpy" {
		t.Errorf("defaults: %+v %v", o, err)
	}
}

func TestBuildWithoutDebootstrap(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	err := Build(context.Background(), filepath.Join(t.TempDir(), "root"), BuildOptions{Mirror: "http://m/debian"})
	if err == nil || !strings.Contains(err.Error(), "apt-get install debootstrap") {
		t.Errorf("Build = %v, want it to say how to install debootstrap", err)
	}
}

func TestBuildRefusesANonEmptyDir(t *testing.T) {
	testenv.NeedRoot(t, "gets as far as the directory with debootstrap")
	if _, err := exec.LookPath("debootstrap"); err != nil {
		t.Skip("needs debootstrap to get as far as the directory")
	}
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "x"), nil, 0o644))
	if err := Build(context.Background(), dir, BuildOptions{Mirror: "http://m/debian"}); err == nil || err.Error() != dir+" is not empty" {
		t.Errorf("Build = %v", err)
	}
}

func TestHostMirror(t *testing.T) {
	deb822 := `Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
`
	if got := mirrorFromDeb822([]byte(deb822), "bookworm"); got != "http://deb.debian.org/debian" {
		t.Errorf("deb822 bookworm: %q", got)
	}
	if got := mirrorFromDeb822([]byte(deb822), "bookworm-security"); got != "http://deb.debian.org/debian-security" {
		t.Errorf("deb822 security: %q", got)
	}
	if got := mirrorFromDeb822([]byte("Types: deb\nURIs: http://x/debian\nSuites: trixie\nComponents: main\nEnabled: no\n"), "trixie"); got != "" {
		t.Errorf("disabled stanza used: %q", got)
	}
	list := "# comment\ndeb-src http://src/debian bookworm main\ndeb [arch=amd64 signed-by=/k.gpg] http://mirror.example/debian bookworm main contrib\n"
	if got := mirrorFromList([]byte(list), "bookworm"); got != "http://mirror.example/debian" {
		t.Errorf("sources.list: %q", got)
	}
	if got := mirrorFromList([]byte(list), "trixie"); got != "" {
		t.Errorf("sources.list other suite: %q", got)
	}
}

func TestDebootstrapLine(t *testing.T) {
	for line, perPackage := range map[string]bool{
		"I: Retrieving libc6 2.36-9+deb12u10":    true,
		"I: Validating libc6 2.36-9+deb12u10":    true,
		"I: Extracting dash...":                  true,
		"I: Configuring libc-bin...":             true,
		"I: Retrieving InRelease ":               false,
		"I: Retrieving Packages ":                false,
		"I: Unpacking the base system...":        false,
		"I: Base system installed successfully.": false,
		"W: Failure trying to run: chroot":       false,
	} {
		if _, got := debootstrapLine(line); got != perPackage {
			t.Errorf("debootstrapLine(%q) per-package = %v", line, got)
		}
	}
}

func TestProgressLines(t *testing.T) {
	var b bytes.Buffer
	p := newProgress(&b)
	p.stage("debootstrap: %s", "bookworm")
	p.chatter("Retrieving libc6")
	p.done()
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "[  0.0s] debootstrap: bookworm") || !strings.HasSuffix(lines[1], "] Retrieving libc6") {
		t.Errorf("not a terminal, so plain lines:\n%s", b.String())
	}
	newProgress(nil).stage("nothing") // must not panic
}

// TestBuildReal runs debootstrap for real, once: with
// STOCKADE_ROOTFS_CACHE=DIR it builds DIR/bookworm unless a previous run
// did, and checks the result. The lead's `stockade run --rootfs` test uses
// the same DIR/bookworm. A relative DIR is taken from the module root.
func TestBuildReal(t *testing.T) {
	cache := os.Getenv("STOCKADE_ROOTFS_CACHE")
	if cache == "" {
		t.Skip("set STOCKADE_ROOTFS_CACHE=DIR to debootstrap a root into DIR/bookworm (about a minute, once)")
	}
	testenv.NeedRoot(t, "debootstrap")
	if !filepath.IsAbs(cache) {
		cache = filepath.Join(moduleRoot(t), cache)
	}
	dir := filepath.Join(cache, DefaultSuite)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	start := time.Now()
	// While it builds, nothing may be mounted below the cache in this
	// (the host's) mount table: debootstrap's /proc and /sys stay in its
	// own namespace, so a build killed with SIGKILL leaves none behind.
	stop, leaked := make(chan struct{}), make(chan string, 1)
	go func() {
		defer close(leaked)
		for {
			b, _ := os.ReadFile("/proc/self/mountinfo")
			for _, line := range strings.Split(string(b), "\n") {
				if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], cache+"/") {
					leaked <- f[4]
					return
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	built, err := EnsureBuilt(ctx, dir, BuildOptions{Progress: testLog{t}})
	close(stop)
	if m, ok := <-leaked; ok {
		t.Errorf("the build mounted %s in the host's mount table", m)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("built=%v in %v", built, time.Since(start).Round(100*time.Millisecond))
	if ps := rootfs.Check(dir); len(ps) != 0 {
		t.Errorf("Check of the built root:\n%s", strings.Join(problemStrings(ps), "\n"))
	}
	passwd, _ := os.ReadFile(filepath.Join(dir, "etc/passwd"))
	if !strings.Contains(string(passwd), "sandbox:x:1000:1000:") {
		t.Errorf("passwd:\n%s", passwd)
	}
	for _, d := range []string{"usr/share/doc", "usr/share/man", "var/cache", "var/lib/apt/lists", "dev", "proc", "work"} {
		if ents, err := os.ReadDir(filepath.Join(dir, d)); err != nil || len(ents) != 0 {
			t.Errorf("%s: %d entries, %v", d, len(ents), err)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "usr/lib/locale")); len(ents) != 1 || ents[0].Name() != "C.utf8" {
		t.Errorf("usr/lib/locale holds %v", ents)
	}
	// Check stays static; this runs the root's python once, in a plain
	// chroot, to show the build works before any jail is involved.
	out, err := exec.Command("chroot", dir, "/usr/bin/python3", "-c", "import json; print(json.dumps([1]))").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "[1]" {
		t.Errorf("python3 in the built root: %q %v", out, err)
	}
	if _, err := EnsureBuilt(ctx, dir, BuildOptions{Packages: []string{"python3-numpy"}}); err == nil || !strings.Contains(err.Error(), "remove it to rebuild") {
		t.Errorf("EnsureBuilt with other packages = %v", err)
	}
}

// testLog sends progress lines to the test log.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	must(t, err)
	for d := dir; d != filepath.Dir(d); d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
	}
	t.Fatal("no go.mod above " + dir)
	return ""
}

// TestDiscardLeavesMountsAlone checks the guard that keeps a failed build's
// cleanup from deleting through a mount.
func TestDiscardLeavesMountsAlone(t *testing.T) {
	testenv.NeedRoot(t, "mounts")
	work := t.TempDir()
	src := t.TempDir()
	must(t, os.WriteFile(filepath.Join(src, "host-file"), []byte("x"), 0o644))
	mp := filepath.Join(work, "root", "dev")
	must(t, os.MkdirAll(mp, 0o755))
	if err := syscall.Mount(src, mp, "", syscall.MS_BIND, ""); err != nil {
		t.Skipf("bind mount: %v", err)
	}
	defer syscall.Unmount(mp, syscall.MNT_DETACH)
	discard(work)
	if _, err := os.Stat(filepath.Join(src, "host-file")); err != nil {
		t.Fatalf("discard deleted through a mount: %v", err)
	}
	if _, err := os.Stat(work); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("discard left %s after unmounting: %v", work, err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func problemStrings(ps []rootfs.Problem) []string {
	var s []string
	for _, p := range ps {
		s = append(s, p.String())
	}
	return s
}
