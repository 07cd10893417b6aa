package rootfs

import (
	"encoding/binary"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/stockade/stockade/internal/testenv"
)

// fakeRoot makes a minimal usr-merged root holding the host's python3 and
// exactly the files ldd says it loads, so that Check can be tried on a
// real ELF without debootstrap. It is independent of the code under test:
// ldd, not Check's own linker, picks the files.
func fakeRoot(t *testing.T) string {
	t.Helper()
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skip("the fixture copies an x86_64 host's python3")
	}
	py, err := filepath.EvalSymlinks("/usr/bin/python3")
	if err != nil {
		t.Skip("no host python3")
	}
	out, err := exec.Command("ldd", py).Output()
	if err != nil {
		t.Skipf("ldd: %v", err)
	}
	root := filepath.Join(t.TempDir(), "root")
	for _, d := range []string{"usr/bin", "usr/lib/x86_64-linux-gnu", "usr/lib64", "etc", "var/tmp"} {
		must(t, os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	must(t, os.Chmod(root, 0o755))
	must(t, os.Chmod(filepath.Join(root, "var/tmp"), 0o777|os.ModeSticky))
	for link, target := range map[string]string{"bin": "usr/bin", "lib": "usr/lib", "lib64": "usr/lib64"} {
		must(t, os.Symlink(target, filepath.Join(root, link)))
	}
	copyFile(t, py, filepath.Join(root, "usr/bin", filepath.Base(py)), 0o755)
	must(t, os.Symlink(filepath.Base(py), filepath.Join(root, "usr/bin/python3")))
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		var p string
		switch {
		case len(f) >= 3 && f[1] == "=>":
			p = f[2]
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			p = f[0]
		default:
			continue
		}
		dst := p
		if strings.HasPrefix(p, "/lib") {
			dst = "/usr" + p // our lib and lib64 are usr-merge symlinks
		}
		src, err := filepath.EvalSymlinks(p)
		must(t, err)
		copyFile(t, src, filepath.Join(root, dst), 0o755)
	}
	return root
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func copyFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	in, err := os.Open(src)
	must(t, err)
	defer in.Close()
	must(t, os.MkdirAll(filepath.Dir(dst), 0o755))
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	must(t, err)
	_, err = io.Copy(out, in)
	must(t, err)
	must(t, out.Close())
}

func problemStrings(ps []Problem) []string {
	var s []string
	for _, p := range ps {
		s = append(s, p.String())
	}
	return s
}

func TestCheckCleanRoot(t *testing.T) {
	root := fakeRoot(t)
	if ps := Check(root); len(ps) != 0 {
		t.Errorf("a clean root has problems:\n%s", strings.Join(problemStrings(ps), "\n"))
	}
	// The same with the host's ld.so.cache, which Check then follows.
	if _, err := os.Stat("/etc/ld.so.cache"); err == nil {
		copyFile(t, "/etc/ld.so.cache", filepath.Join(root, "etc/ld.so.cache"), 0o644)
		if ps := Check(root); len(ps) != 0 {
			t.Errorf("with an ld.so.cache:\n%s", strings.Join(problemStrings(ps), "\n"))
		}
	}
}

// TestCheckFindsPlantedProblems plants one problem per case in a clean root
// and checks that Check reports it, and only it.
func TestCheckFindsPlantedProblems(t *testing.T) {
	outsidePython := filepath.Join(t.TempDir(), "python3")
	copyFile(t, "/usr/bin/python3", outsidePython, 0o755)
	tests := []struct {
		name  string
		root  bool // needs root to plant
		plant func(t *testing.T, root string)
		want  []string
		exact bool // want is the whole list
	}{
		{"no python3", false, func(t *testing.T, r string) {
			must(t, os.Remove(filepath.Join(r, "usr/bin/python3")))
		}, []string{"/usr/bin/python3: no python3 here or at /bin/python3"}, true},
		{"python3 links out of the root", false, func(t *testing.T, r string) {
			// An absolute symlink resolves inside the root, never on the host.
			must(t, os.Remove(filepath.Join(r, "usr/bin/python3")))
			must(t, os.Symlink(outsidePython, filepath.Join(r, "usr/bin/python3")))
		}, []string{"/usr/bin/python3: no python3 here or at /bin/python3"}, true},
		{"python3 not executable", false, func(t *testing.T, r string) {
			p, _ := filepath.EvalSymlinks(filepath.Join(r, "usr/bin/python3"))
			must(t, os.Chmod(p, 0o644))
		}, []string{"/usr/bin/python3.11: python3 is not executable"}, true},
		{"python3 not ELF", false, func(t *testing.T, r string) {
			p, _ := filepath.EvalSymlinks(filepath.Join(r, "usr/bin/python3"))
			must(t, os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755))
		}, []string{"/usr/bin/python3.11: python3 is not an ELF executable"}, false},
		{"python3 for another machine", false, func(t *testing.T, r string) {
			p, _ := filepath.EvalSymlinks(filepath.Join(r, "usr/bin/python3"))
			f, err := os.OpenFile(p, os.O_WRONLY, 0)
			must(t, err)
			var m [2]byte
			binary.LittleEndian.PutUint16(m[:], 183) // EM_AARCH64, at e_machine
			_, err = f.WriteAt(m[:], 18)
			must(t, err)
			must(t, f.Close())
		}, []string{"/usr/bin/python3.11: python3 is built for EM_AARCH64; this machine is EM_X86_64"}, false},
		{"missing ELF interpreter, and a library's need for it", false, func(t *testing.T, r string) {
			// python3 names ld.so as its interpreter; libc names it in
			// DT_NEEDED, so this also shows the walk is transitive.
			must(t, os.Remove(filepath.Join(r, "usr/lib64/ld-linux-x86-64.so.2")))
		}, []string{
			"/usr/bin/python3.11: its ELF interpreter /lib64/ld-linux-x86-64.so.2 does not resolve inside the root: /usr/lib64/ld-linux-x86-64.so.2: no such file or directory",
			"/usr/lib/x86_64-linux-gnu/libc.so.6: needs ld-linux-x86-64.so.2, which is not in the root",
		}, false},
		{"missing library", false, func(t *testing.T, r string) {
			must(t, os.Remove(filepath.Join(r, "usr/lib/x86_64-linux-gnu/libz.so.1")))
		}, []string{"/usr/bin/python3.11: needs libz.so.1, which is not in the root (looked in the root's ld.so.cache, /lib/x86_64-linux-gnu, /usr/lib/x86_64-linux-gnu, /lib64, /usr/lib64, /lib, /usr/lib, /usr/local/lib)"}, true},
		{"library that is not ELF", false, func(t *testing.T, r string) {
			must(t, os.WriteFile(filepath.Join(r, "usr/lib/x86_64-linux-gnu/libc.so.6"), []byte("not elf"), 0o644))
		}, []string{"/usr/bin/python3.11: needs libc.so.6, which is not in the root"}, false},
		{"setuid file", false, func(t *testing.T, r string) {
			must(t, os.WriteFile(filepath.Join(r, "usr/bin/su"), nil, 0o755))
			must(t, os.Chmod(filepath.Join(r, "usr/bin/su"), 0o755|os.ModeSetuid))
		}, []string{"/usr/bin/su: setuid"}, true},
		{"setgid file", false, func(t *testing.T, r string) {
			must(t, os.WriteFile(filepath.Join(r, "usr/bin/wall"), nil, 0o755))
			must(t, os.Chmod(filepath.Join(r, "usr/bin/wall"), 0o755|os.ModeSetgid))
		}, []string{"/usr/bin/wall: setgid"}, true},
		{"world-writable file", false, func(t *testing.T, r string) {
			must(t, os.WriteFile(filepath.Join(r, "etc/hosts"), nil, 0o644))
			must(t, os.Chmod(filepath.Join(r, "etc/hosts"), 0o666))
		}, []string{"/etc/hosts: world-writable (0666)"}, true},
		{"world-writable directory without sticky", false, func(t *testing.T, r string) {
			must(t, os.Mkdir(filepath.Join(r, "usr/share"), 0o755))
			must(t, os.Chmod(filepath.Join(r, "usr/share"), 0o777))
		}, []string{"/usr/share: world-writable (0777)"}, true},
		{"world-writable root", false, func(t *testing.T, r string) {
			must(t, os.Chmod(r, 0o777))
		}, []string{"/: world-writable (0777)"}, true},
		{"named pipe", false, func(t *testing.T, r string) {
			must(t, syscall.Mkfifo(filepath.Join(r, "etc/initctl"), 0o600))
		}, []string{"/etc/initctl: named pipe"}, true},
		{"socket", false, func(t *testing.T, r string) {
			l, err := net.Listen("unix", filepath.Join(r, "etc/sock"))
			must(t, err)
			l.(*net.UnixListener).SetUnlinkOnClose(false)
			l.Close()
		}, []string{"/etc/sock: socket"}, true},
		{"device node", true, func(t *testing.T, r string) {
			must(t, syscall.Mknod(filepath.Join(r, "etc/null"), syscall.S_IFCHR|0o666, 1<<8|3))
		}, []string{"/etc/null: character device: a jail root holds no device nodes"}, true},
		{"owned by the jail user", true, func(t *testing.T, r string) {
			must(t, os.WriteFile(filepath.Join(r, "etc/mine"), nil, 0o644))
			must(t, os.Chown(filepath.Join(r, "etc/mine"), 1000, 0))
		}, []string{"/etc/mine: writable by the jail user (owner uid 1000)"}, true},
		{"writable by the jail user's group", true, func(t *testing.T, r string) {
			must(t, os.Mkdir(filepath.Join(r, "srv"), 0o775))
			must(t, os.Chmod(filepath.Join(r, "srv"), 0o775))
			must(t, os.Chown(filepath.Join(r, "srv"), 0, 1000))
		}, []string{"/srv: writable by the jail user's group (group gid 1000)"}, true},
		{"what the jail mounts over is not looked into", true, func(t *testing.T, r string) {
			for _, d := range []string{"dev", "proc", "tmp", "work"} {
				must(t, os.Mkdir(filepath.Join(r, d), 0o755))
				must(t, syscall.Mknod(filepath.Join(r, d, "null"), syscall.S_IFCHR|0o666, 1<<8|3))
			}
		}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.root {
				testenv.NeedRoot(t, "planting this")
			}
			root := fakeRoot(t)
			tt.plant(t, root)
			got := problemStrings(Check(root))
			if tt.exact && strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("problems:\n%s\nwant exactly:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			for _, w := range tt.want {
				found := false
				for _, g := range got {
					found = found || strings.HasPrefix(g, w)
				}
				if !found {
					t.Errorf("no problem %q in:\n%s", w, strings.Join(got, "\n"))
				}
			}
		})
	}
}

func TestCheckNotADirectory(t *testing.T) {
	f := filepath.Join(t.TempDir(), "f")
	must(t, os.WriteFile(f, nil, 0o644))
	if got := problemStrings(Check(f)); len(got) != 1 || got[0] != f+": not a directory" {
		t.Errorf("Check(file) = %v", got)
	}
	if got := Check(filepath.Join(f, "missing")); len(got) != 1 {
		t.Errorf("Check(missing) = %v", got)
	}
}

func TestResolveIn(t *testing.T) {
	root := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(root, "usr/lib"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "usr/lib/libx.so"), nil, 0o644))
	must(t, os.Symlink("usr/lib", filepath.Join(root, "lib")))
	must(t, os.Symlink("/usr/lib/libx.so", filepath.Join(root, "abs")))
	must(t, os.Symlink("../../../../usr/lib/libx.so", filepath.Join(root, "usr/lib/up")))
	must(t, os.Symlink("loop", filepath.Join(root, "loop")))
	tests := []struct{ in, want string }{
		{"/lib/libx.so", "/usr/lib/libx.so"},
		{"/abs", "/usr/lib/libx.so"},        // absolute links start at the root
		{"/usr/lib/up", "/usr/lib/libx.so"}, // ".." stops at the root
		{"/../../lib/libx.so", "/usr/lib/libx.so"},
		{"/loop", "ERR"},
		{"/usr/lib/libx.so/x", "ERR"},
		{"/missing", "ERR"},
	}
	for _, tt := range tests {
		jp, hp, err := resolveIn(root, tt.in)
		got := jp
		if err != nil {
			got = "ERR"
		} else if hp != filepath.Join(root, jp) {
			t.Errorf("resolveIn(%q) host path %q", tt.in, hp)
		}
		if got != tt.want {
			t.Errorf("resolveIn(%q) = %q (%v), want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestParseLDCache(t *testing.T) {
	data, err := os.ReadFile("/etc/ld.so.cache")
	if err != nil || runtime.GOARCH != "amd64" {
		t.Skip("needs an x86_64 host's ld.so.cache")
	}
	cache := parseLDCache(data)
	if cache == nil {
		t.Skip("the host's ld.so.cache is not in the glibc 2.32+ format")
	}
	found := false
	for _, p := range cache["libc.so.6"] {
		found = found || strings.HasSuffix(p, "/x86_64-linux-gnu/libc.so.6")
	}
	if !found {
		t.Errorf("libc.so.6 -> %v", cache["libc.so.6"])
	}
	for _, bad := range [][]byte{nil, []byte("glibc-ld.so.cache1.1"), append([]byte(ldCacheMagic), make([]byte, 60)...)} {
		if c := parseLDCache(bad); len(c) != 0 {
			t.Errorf("parseLDCache(%q) = %v", bad, c)
		}
	}
}
