package pydata

import (
	"encoding/json"
	"os"
	"path/filepath"
)

// SeedFontCache stores the font cache files in dir (matplotlib's
// fontlist-vNNN.json, built ahead of time for this root, as the VM tier's
// guest image carries them) as the cache of the root "/" in base, where
// FontCache finds it for a host whose CacheDir is base's parent: no run
// then builds it. The files are checked as a build's output is; a base
// that holds the cache already is left as it is.
func SeedFontCache(base, dir string) error {
	key, ok, err := fontCacheKey("/")
	if err != nil || !ok {
		return err
	}
	if _, ok, err := lookupFontCache(base, key); err != nil || ok {
		return err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	out := map[string]string{}
	for _, e := range ents {
		if !fileName(e.Name()) || !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		out[e.Name()] = string(b)
	}
	b, err := json.Marshal(out)
	if err != nil {
		return err
	}
	files, err := parseFontCache(b)
	if err != nil {
		return err
	}
	return storeFontCache(base, key, files)
}
