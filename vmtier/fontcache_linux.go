package vmtier

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/stockade/stockade/jail"
	"github.com/stockade/stockade/pydata"
)

// guestFontCache is where the image carries matplotlib's font cache,
// built once with the image (mkimage.sh) for the guest's root.
const guestFontCache = "/usr/lib/stockade/matplotlib"

// guestCacheDir is the guest jails' jail.Host.CacheDir (a tmpfs).
const guestCacheDir = "/var/cache/stockade"

var seedOnce sync.Once

// guestProviders are the guest jails' providers: the font cache, seeded
// from the image's on first use, so that a plot in the guest does not
// build it (a minute under emulation). Without an image cache, or if it
// does not fit the root, the provider builds one as on a host.
func guestProviders() []jail.Provider {
	seedOnce.Do(func() {
		if _, err := os.Stat(guestFontCache); err != nil {
			return
		}
		if err := pydata.SeedFontCache(filepath.Join(guestCacheDir, "matplotlib"), guestFontCache); err != nil {
			fmt.Fprintln(os.Stderr, "stockade-vm: matplotlib font cache:", err)
		}
	})
	return []jail.Provider{pydata.FontCache{}}
}
