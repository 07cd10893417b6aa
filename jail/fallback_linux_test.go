package jail

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stockade/stockade/internal/runlock"
)

// TestAttackSweepTakesUsersOwnDirectory: the sweep of dead runs' fallback
// bases removes what it matches, as the user who runs stockade. The user's
// own directories beside the usual base ("mv stockade-1000
// stockade-1000.old") match a prefix but are not bases a run made; only a
// name os.MkdirTemp makes (the prefix and decimal digits) may be swept.
func TestAttackSweepTakesUsersOwnDirectory(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	prefix := filepath.Join(os.TempDir(), fallbackPrefix())
	users := []string{"old", "bak", "1.old", "12a", "", "12345678901", "-1"}
	for _, s := range users {
		if err := os.MkdirAll(filepath.Join(prefix+s, "keep"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dead, err := os.MkdirTemp(os.TempDir(), fallbackPrefix())
	if err != nil {
		t.Fatal(err)
	}
	sweepFallbacks(func(runlock.Stale) error { return nil }, func(err error) { t.Log(err) })
	for _, s := range users {
		if _, err := os.Stat(filepath.Join(prefix+s, "keep")); err != nil {
			t.Errorf("the user's own %s was swept: %v", prefix+s, err)
		}
	}
	if _, err := os.Lstat(dead); !os.IsNotExist(err) {
		t.Errorf("the unlocked base %s of a dead run was not swept: %v", dead, err)
	}
}
