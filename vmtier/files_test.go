package vmtier

import (
	"os"
	"path/filepath"
	"testing"
)

// The guest's reply names the files to write into the --workdir: a guest
// that owns its kernel may name any path. None may land outside DIR:
// not by "..", not by an absolute path, not through a symlink DIR holds.
func TestAttackReplyPathsLeaveWorkdir(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "work")
	outside := filepath.Join(base, "outside")
	for _, d := range []string{dir, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(dir, "esc")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"../outside/pwn", "esc/pwn", outside + "/pwn", "a/../../outside/pwn", "esc/sub/pwn"} {
		err := writeTree(dir, []File{{Path: p, Mode: 0o644, Data: []byte("pwned")}}, -1, -1)
		if err == nil {
			t.Errorf("path %q: written", p)
		}
		if _, err := os.Lstat(filepath.Join(outside, "pwn")); err == nil {
			t.Fatalf("path %q: a file appeared outside the workdir", p)
		}
		if _, err := os.Lstat(filepath.Join(outside, "sub")); err == nil {
			t.Fatalf("path %q: a directory appeared outside the workdir", p)
		}
	}
	// An ordinary path still goes in.
	if err := writeTree(dir, []File{{Path: "out/ok.txt", Mode: 0o644, Data: []byte("ok")}}, -1, -1); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "out/ok.txt")); err != nil || string(b) != "ok" {
		t.Errorf("out/ok.txt: %q %v", b, err)
	}
}
