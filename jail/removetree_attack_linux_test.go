package jail

import (
	"os"
	"path/filepath"
	"testing"
)

// TestAttackRemoveTreeFollowsRenamedDirectoryUp: removeTree goes back up
// through "..", counting levels, on the assumption that ".." of a directory
// it entered is still the one it came from. A directory of the tree
// renamed elsewhere while removeTree is inside it (by anything that can
// still write the tree: a process of the jail's uid that outlived it, the
// user's own process when the jail is the user's uid) took the climb out
// of the tree, and removeTree emptied every directory on the way back up
// by the count: files beside the run directory, the base every run shares.
func TestAttackRemoveTreeFollowsRenamedDirectoryUp(t *testing.T) {
	base := t.TempDir()
	run := filepath.Join(base, "run")
	victim := filepath.Join(base, "victim", "deep")
	for _, d := range []string{filepath.Join(run, "a", "b", "c"), victim} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(run, "a", "b", "c", "f"), filepath.Join(base, "victim", "precious"), filepath.Join(base, "other-run")} {
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Once removeTree is inside run/a/b, b moves to victim/deep/b: three
	// levels deeper than it was, in a tree removeTree never entered.
	moved := false
	removeTreeEntered = func(depth int) {
		if depth == 2 && !moved {
			moved = true
			if err := os.Rename(filepath.Join(run, "a", "b"), filepath.Join(victim, "b")); err != nil {
				t.Errorf("rename: %v", err)
			}
		}
	}
	defer func() { removeTreeEntered = nil }()
	_ = removeTree(run) // an error is fine; deleting outside run is not
	if !moved {
		t.Fatal("the hook never ran")
	}
	for _, f := range []string{filepath.Join(base, "victim", "precious"), filepath.Join(base, "other-run")} {
		if _, err := os.Lstat(f); err != nil {
			t.Errorf("%s, outside the tree, is gone: %v", f, err)
		}
	}
}
