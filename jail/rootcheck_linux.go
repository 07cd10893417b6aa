package jail

import (
	"fmt"
	"path/filepath"

	"github.com/stockade/stockade/rootfs"
)

// checkRoot runs `stockade rootfs check` on a prepared root before every
// run. Its verdict is kept in the caller's own run base directory under
// the tree's fingerprint (rootfs.CheckCached), so a tree that has not
// changed since it passed skips the costly part, and a changed one is
// checked again.
func checkRoot(dir string) error {
	cache := ""
	// Never a fallback base (see newFallback): that one is made per run.
	if base := RunBase(); ensureBase(base) == nil {
		cache = filepath.Join(base, "checked-roots")
	}
	probs := rootfs.CheckCached(dir, cache)
	if len(probs) == 0 {
		return nil
	}
	return fmt.Errorf("--rootfs %s cannot serve as a jail's root: %s (%d problems in all; `stockade rootfs check %s` lists them)", dir, probs[0], len(probs), dir)
}
