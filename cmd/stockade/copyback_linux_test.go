package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAttackCopyBackNamesCarryEscapes: the jail names a symlink out of DIR
// (which copy-back skips and lists) with a terminal escape sequence and a
// newline followed by a line of stockade's own. The caller's stderr must
// get the name quoted: no raw ESC for its terminal, no forged line.
func TestAttackCopyBackNamesCarryEscapes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	dir := t.TempDir()
	// The jail opens DIR as its own uid: the path must be searchable.
	if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 4242, 4242); err != nil {
		t.Fatal(err)
	}
	name := "\x1b]0;owned\x07\x1b[2J\nstockade: copy-back: nothing skipped"
	code, _, stderr := invoke(t, "", "run", "--workdir", dir, "--", "python3", "-c",
		"import os, sys; os.symlink('/etc/passwd', sys.argv[1])", name)
	if code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	if strings.ContainsRune(stderr, '\x1b') || strings.ContainsRune(stderr, '\a') {
		t.Errorf("stderr carries the jail's raw escape sequence: %q", stderr)
	}
	lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], `stockade: copy-back: "\x1b]0;owned\a\x1b[2J\nstockade: `) {
		t.Errorf("stderr is %d lines, want the one skipped symlink with its name quoted:\n%q", len(lines), stderr)
	}
}
