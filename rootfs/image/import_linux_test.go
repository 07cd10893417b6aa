package image

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/testenv"
	"github.com/stockade/stockade/rootfs"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// ent is one tar entry of a test layer.
type ent struct {
	name string
	typ  byte
	mode int64
	body string // file content, or link target
}

func dir(name string, mode int64) ent        { return ent{name, tar.TypeDir, mode, ""} }
func file(name, body string, mode int64) ent { return ent{name, tar.TypeReg, mode, body} }
func symlink(name, target string) ent        { return ent{name, tar.TypeSymlink, 0o777, target} }
func hardlink(name, target string) ent       { return ent{name, tar.TypeLink, 0o644, target} }

var testMtime = time.Date(2024, 3, 1, 12, 0, 0, 0, time.UTC)

func layer(t *testing.T, ents ...ent) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		hdr := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, ModTime: testMtime, Uid: 1000, Gid: 1000}
		switch e.typ {
		case tar.TypeReg:
			hdr.Size = int64(len(e.body))
		case tar.TypeSymlink, tar.TypeLink:
			hdr.Linkname = e.body
		case tar.TypeChar:
			hdr.Devmajor, hdr.Devminor = 1, 3
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if e.typ == tar.TypeReg {
			io.WriteString(tw, e.body)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func image(t *testing.T, layers ...v1.Layer) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func writeLayout(t *testing.T, imgs map[string]v1.Image) string {
	t.Helper()
	p, err := layout.Write(filepath.Join(t.TempDir(), "oci"), empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	for arch, img := range imgs {
		var opts []layout.Option
		if arch != "" {
			opts = append(opts, layout.WithPlatform(v1.Platform{OS: "linux", Architecture: arch}))
		}
		if err := p.AppendImage(img, opts...); err != nil {
			t.Fatal(err)
		}
	}
	return string(p)
}

func writeDockerSave(t *testing.T, img v1.Image) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "image.tar")
	if err := tarball.WriteToFile(path, name.MustParseReference("stockade/test:latest"), img); err != nil {
		t.Fatal(err)
	}
	return path
}

// baseLayers are an image of three layers with every benign feature:
// a whiteout of a file and of a directory, an opaque directory whose same
// layer adds a file, a symlink, a hardlink, a device node, a FIFO, setuid
// and setgid files, a sticky and a read-only directory, and a file whose
// parents are never listed.
func baseLayers(t *testing.T, outside string) []v1.Layer {
	return []v1.Layer{
		layer(t,
			dir("./", 0o755),
			dir("etc/", 0o755), file("etc/passwd", "root", 0o644), file("etc/keep", "", 0o644),
			dir("opq/", 0o755), file("opq/old1", "x", 0o644), dir("opq/sub/", 0o755), file("opq/sub/old2", "x", 0o644),
			file("gone.txt", "x", 0o644),
			dir("olddir/", 0o755), dir("olddir/a/", 0o755), file("olddir/a/b", "x", 0o644),
			dir("usr/", 0o755), dir("usr/bin/", 0o755),
			file("usr/bin/su", "su", 0o4755), file("usr/bin/sg", "sg", 0o2755),
			file("usr/bin/python3.11", "\x7fELF", 0o755), symlink("usr/bin/python3", "python3.11"),
			hardlink("usr/bin/pyhard", "usr/bin/python3.11"),
			dir("dev/", 0o755), ent{"dev/null", tar.TypeChar, 0o666, ""}, ent{"fifo", tar.TypeFifo, 0o644, ""},
			dir("tmp/", 0o1777),
			dir("ro/", 0o555), file("ro/file", "r", 0o444),
			file("implicit/deep/file", "i", 0o600),
		),
		layer(t,
			file("etc/passwd", "sandbox", 0o644),
			file(".wh.gone.txt", "", 0o644),
			file(".wh.olddir", "", 0o644),
			file("opq/new", "new", 0o644), // before the marker: still this layer's, so kept
			file("opq/.wh..wh..opq", "", 0o644),
		),
		layer(t,
			symlink("evil", outside), // an absolute symlink is legal; writing through it is not
			symlink("inroot", "etc"),
		),
	}
}

// wantBase is the tree baseLayers make, exactly.
var wantBase = []string{
	"dev/ dir 0755",
	"etc/ dir 0755",
	"etc/keep file 0644 \"\"",
	"etc/passwd file 0644 \"sandbox\"",
	"evil symlink -> OUTSIDE",
	"implicit/ dir 0755",
	"implicit/deep/ dir 0755",
	"implicit/deep/file file 0600 \"i\"",
	"inroot symlink -> etc",
	"opq/ dir 0755",
	"opq/new file 0644 \"new\"",
	"ro/ dir 0555",
	"ro/file file 0444 \"r\"",
	"tmp/ dir 1777",
	"usr/ dir 0755",
	"usr/bin/ dir 0755",
	"usr/bin/pyhard file 0755 \"\\x7fELF\" links=2",
	"usr/bin/python3 symlink -> python3.11",
	"usr/bin/python3.11 file 0755 \"\\x7fELF\" links=2",
	"usr/bin/sg file 0755 \"sg\"",
	"usr/bin/su file 0755 \"su\"",
}

// listTree describes every entry below root, one line each, sorted.
func listTree(t *testing.T, root, outside string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		perm := fmt.Sprintf("%04o", uint32(fi.Mode().Perm())|boolBit(fi.Mode()&fs.ModeSticky != 0, 0o1000)|
			boolBit(fi.Mode()&fs.ModeSetuid != 0, 0o4000)|boolBit(fi.Mode()&fs.ModeSetgid != 0, 0o2000))
		switch {
		case fi.IsDir():
			out = append(out, rel+"/ dir "+perm)
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			out = append(out, rel+" symlink -> "+strings.ReplaceAll(target, outside, "OUTSIDE"))
		case fi.Mode().IsRegular():
			data, _ := os.ReadFile(p)
			line := fmt.Sprintf("%s file %s %q", rel, perm, data)
			if n := fi.Sys().(*syscall.Stat_t).Nlink; n > 1 {
				line += fmt.Sprintf(" links=%d", n)
			}
			out = append(out, line)
		default:
			out = append(out, rel+" "+fi.Mode().Type().String())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func boolBit(b bool, bit uint32) uint32 {
	if b {
		return bit
	}
	return 0
}

// outsideDir is a directory beside the import target that an escape would
// write into or delete from.
func outsideDir(t *testing.T) string {
	t.Helper()
	outside := filepath.Join(t.TempDir(), "outside")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	return outside
}

func assertOutsideUntouched(t *testing.T, outside string) {
	t.Helper()
	ents, err := os.ReadDir(outside)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(filepath.Join(outside, "secret"))
	if len(ents) != 1 || string(data) != "host" {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("the import reached outside its root: %s holds %v, secret=%q", outside, names, data)
	}
	if _, err := os.Lstat(filepath.Join(filepath.Dir(outside), "escape")); err == nil {
		t.Errorf("the import wrote %s", filepath.Join(filepath.Dir(outside), "escape"))
	}
}

func TestImportLayersExactly(t *testing.T) {
	outside := outsideDir(t)
	img := image(t, baseLayers(t, outside)...)
	for _, tc := range []struct{ kind, path string }{
		{"OCI layout", writeLayout(t, map[string]v1.Image{"": img})},
		{"docker save", writeDockerSave(t, img)},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), "root")
			var log bytes.Buffer
			if err := ImportWith(context.Background(), tc.path, dst, ImportOptions{Progress: &log}); err != nil {
				t.Fatal(err)
			}
			if got := listTree(t, dst, outside); strings.Join(got, "\n") != strings.Join(wantBase, "\n") {
				t.Errorf("tree:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantBase, "\n"))
			}
			fi, err := os.Stat(filepath.Join(dst, "usr/bin/python3.11"))
			if err != nil || !fi.ModTime().Equal(testMtime) {
				t.Errorf("mtime not kept: %v %v", fi.ModTime(), err)
			}
			if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != os.Geteuid() {
				t.Errorf("owner %d kept from the image, want the caller's %d", st.Uid, os.Geteuid())
			}
			for _, want := range []string{"layer 1/3", "cleared setuid on usr/bin/su", "cleared setgid on usr/bin/sg",
				"skipped dev/null: a device node", "skipped fifo: a FIFO", "imported 3 layers"} {
				if !strings.Contains(log.String(), want) {
					t.Errorf("progress lacks %q:\n%s", want, log.String())
				}
			}
			assertOutsideUntouched(t, outside)
		})
	}
}

// TestImportRefusesEscapes names each attack: a layer on top of the base
// image tries it, and the import must fail naming the entry, write and
// delete nothing outside, and leave no root behind.
func TestImportRefusesEscapes(t *testing.T) {
	tests := []struct {
		attack string
		ents   []ent
		entry  string
		reason string
	}{
		{"dotdot path", []ent{file("../escape", "x", 0o644)}, "../escape", `".." in the path`},
		{"dotdot inside a path", []ent{file("etc/../../escape", "x", 0o644)}, "etc/../../escape", `".." in the path`},
		{"absolute path", []ent{file("/abs", "x", 0o644)}, "/abs", "absolute path"},
		{"write through a planted absolute symlink", []ent{file("evil/x", "x", 0o644)}, "evil/x", "a parent directory is a symlink; writing through it is refused"},
		{"symlink then write in one layer", []ent{symlink("lib", "/etc"), file("lib/x", "x", 0o644)}, "lib/x", "a parent directory is a symlink; writing through it is refused"},
		{"relative symlink up and out", []ent{symlink("up", "../../.."), dir("up/d/", 0o755)}, "up/d/", "a parent directory is a symlink; writing through it is refused"},
		{"write through an in-root symlink", []ent{file("inroot/x", "x", 0o644)}, "inroot/x", "a parent directory is a symlink; writing through it is refused"},
		{"hardlink out by dotdot", []ent{hardlink("hl", "../outside/secret")}, "hl", `hardlink to "../outside/secret": ".." in the path`},
		{"hardlink to an absolute path", []ent{hardlink("hl", "/etc/shadow")}, "hl", `hardlink to "/etc/shadow": absolute path`},
		{"hardlink through a symlink", []ent{hardlink("hl", "evil/secret")}, "hl", "hardlink target evil/secret: a parent directory is a symlink; writing through it is refused"},
		{"whiteout through a symlink", []ent{file("evil/.wh.secret", "", 0o644)}, "evil/.wh.secret", "a parent directory is a symlink; writing through it is refused"},
		{"opaque dir through a symlink", []ent{file("evil/.wh..wh..opq", "", 0o644)}, "evil/.wh..wh..opq", "a parent directory is a symlink; writing through it is refused"},
		{"whiteout of the parent", []ent{file("etc/.wh...", "", 0o644)}, "etc/.wh...", `whiteout of ".."`},
		{"hostile name after good ones", []ent{file("fine", "x", 0o644), file("../escape", "x", 0o644)}, "../escape", `".." in the path`},
	}
	for _, tt := range tests {
		t.Run(tt.attack, func(t *testing.T) {
			outside := outsideDir(t)
			img := image(t, append(baseLayers(t, outside), layer(t, tt.ents...))...)
			dst := filepath.Join(filepath.Dir(outside), "root")
			err := Import(context.Background(), writeLayout(t, map[string]v1.Image{"": img}), dst)
			var ue *UnsafeEntryError
			if !errors.As(err, &ue) {
				t.Fatalf("Import = %v, want an *UnsafeEntryError", err)
			}
			if ue.Layer != 4 || ue.Entry != tt.entry || ue.Reason != tt.reason {
				t.Errorf("refused layer %d entry %q for %q; want layer 4 entry %q for %q", ue.Layer, ue.Entry, ue.Reason, tt.entry, tt.reason)
			}
			if !strings.HasPrefix(err.Error(), "layer 4 (sha256:") {
				t.Errorf("message %q", err)
			}
			assertOutsideUntouched(t, outside)
			if _, err := os.Lstat(dst); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("a failed import left %s behind", dst)
			}
		})
	}
}

func TestImportPicksThePlatform(t *testing.T) {
	other := "arm64"
	if runtime.GOARCH == "arm64" {
		other = "amd64"
	}
	mine := image(t, layer(t, file("arch", runtime.GOARCH, 0o644)))
	theirs := image(t, layer(t, file("arch", other, 0o644)))
	src := writeLayout(t, map[string]v1.Image{runtime.GOARCH: mine, other: theirs})
	dst := filepath.Join(t.TempDir(), "root")
	if err := Import(context.Background(), src, dst); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(filepath.Join(dst, "arch")); string(data) != runtime.GOARCH {
		t.Errorf("imported the %q image", data)
	}

	only := writeLayout(t, map[string]v1.Image{other: theirs})
	err := Import(context.Background(), only, filepath.Join(t.TempDir(), "root"))
	if want := fmt.Sprintf("no image for linux/%s in the index (it has linux/%s)", runtime.GOARCH, other); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Import = %v, want %q", err, want)
	}
}

func TestImportRefusesBadTargets(t *testing.T) {
	img := writeLayout(t, map[string]v1.Image{"": image(t, layer(t, file("a", "a", 0o644)))})
	full := t.TempDir()
	os.WriteFile(filepath.Join(full, "x"), nil, 0o644)
	notDir := filepath.Join(full, "x")
	tests := []struct{ image, dst, want string }{
		{img, full, full + " is not empty"},
		{img, notDir, notDir + " exists and is not a directory"},
		{full, filepath.Join(full, "r"), "not an OCI image layout (no oci-layout file)"},
		{notDir, filepath.Join(full, "r"), "not a docker save archive"},
		{filepath.Join(full, "missing"), filepath.Join(full, "r"), "no such file or directory"},
	}
	for _, tt := range tests {
		err := Import(context.Background(), tt.image, tt.dst)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Import(%s, %s) = %v, want %q", tt.image, tt.dst, err, tt.want)
		}
	}
	if ents, _ := os.ReadDir(full); len(ents) != 1 {
		t.Errorf("a refused import changed %s: %v", full, ents)
	}
}

func TestImportCancels(t *testing.T) {
	img := writeLayout(t, map[string]v1.Image{"": image(t, layer(t, file("a", "a", 0o644)))})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	dst := filepath.Join(t.TempDir(), "root")
	if err := Import(ctx, img, dst); !errors.Is(err, context.Canceled) {
		t.Errorf("Import = %v, want context.Canceled", err)
	}
	if _, err := os.Lstat(dst); !errors.Is(err, fs.ErrNotExist) {
		t.Error("a cancelled import left its root behind")
	}
}

func TestEntryPath(t *testing.T) {
	for in, want := range map[string]string{
		"etc/passwd": "etc/passwd", "./etc/passwd": "etc/passwd", "etc//x/": "etc/x", "./": ".", ".": ".", "a/./b": "a/b",
		"..": "ERR", "a/..": "ERR", "/etc": "ERR", "a/../b": "ERR", "...": "...", "..a": "..a",
	} {
		got, err := entryPath(in)
		if err != nil {
			got = "ERR"
		}
		if got != want {
			t.Errorf("entryPath(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestImportBuiltRoot packs the root TestBuildReal built into a one-layer
// image, imports it, and checks the result as a jail root: a real-sized
// image with real symlink farms, hardlinks and modes goes through intact.
func TestImportBuiltRoot(t *testing.T) {
	cache := os.Getenv("STOCKADE_ROOTFS_CACHE")
	testenv.NeedRoot(t, "imports the built root")
	if cache == "" {
		t.Skip("needs STOCKADE_ROOTFS_CACHE (see TestBuildReal)")
	}
	if !filepath.IsAbs(cache) {
		cache = filepath.Join(moduleRoot(t), cache)
	}
	src := filepath.Join(cache, DefaultSuite)
	if _, _, err := readStamp(src); err != nil {
		t.Skip("no built root yet; TestBuildReal makes it")
	}
	layerPath := filepath.Join(t.TempDir(), "layer.tar")
	must(t, tarTree(src, layerPath))
	l, err := tarball.LayerFromFile(layerPath)
	must(t, err)
	dst := filepath.Join(t.TempDir(), "root")
	if err := Import(context.Background(), writeDockerSave(t, image(t, l)), dst); err != nil {
		t.Fatal(err)
	}
	if ps := rootfs.Check(dst); len(ps) != 0 {
		t.Errorf("Check of the imported root:\n%s", strings.Join(problemStrings(ps), "\n"))
	}
	out, err := exec.Command("chroot", dst, "/usr/bin/python3", "-c", "import json; print(json.dumps([2]))").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "[2]" {
		t.Errorf("python3 in the imported root: %q %v", out, err)
	}
}

// tarTree writes dir as a layer tarball, as `docker export` would.
func tarTree(dir, out string) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	seen := map[uint64]string{}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		hdr.Name = rel
		if fi.IsDir() {
			hdr.Name += "/"
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode().IsRegular() && st.Nlink > 1 {
			if first, ok := seen[st.Ino]; ok {
				hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
			} else {
				seen[st.Ino] = rel
			}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if hdr.Typeflag == tar.TypeReg {
			data, err := os.Open(p)
			if err != nil {
				return err
			}
			defer data.Close()
			_, err = io.Copy(tw, data)
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}
