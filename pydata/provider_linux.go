package pydata

import (
	"context"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/stockade/stockade/internal/runlock"
	"github.com/stockade/stockade/jail"
)

// fontCacheBuildTimeout bounds the one run that builds a root's matplotlib
// font cache (about a second on a desktop's fonts).
const fontCacheBuildTimeout = 2 * time.Minute

// Provide returns the cache's bind, directory, links and MPLCONFIGDIR for
// spec's root, building the cache first if this host has none for the
// root yet; nothing when the root has no matplotlib or the payload brings
// its own MPLCONFIGDIR (as the run that builds the cache does). A cache
// that cannot be found or built costs the run nothing but matplotlib's
// own rebuild, so failures are notices, never errors.
func (FontCache) Provide(ctx context.Context, spec jail.Spec, notices io.Writer) (jail.Provision, error) {
	if slices.ContainsFunc(spec.Env, func(kv string) bool { return strings.HasPrefix(kv, "MPLCONFIGDIR=") }) {
		return jail.Provision{}, nil
	}
	note := func(format string, a ...any) {
		if notices != nil {
			fmt.Fprintf(notices, "stockade: matplotlib font cache: "+format+"\n", a...)
		}
	}
	root := "/"
	if spec.Rootfs != jail.RootfsHost {
		root = spec.Rootfs
	}
	key, ok, err := fontCacheKey(root)
	if err != nil {
		note("%v", err)
		return jail.Provision{}, nil
	}
	if !ok {
		return jail.Provision{}, nil
	}
	base := fontCacheBase(spec.Host)
	if base == "" {
		return jail.Provision{}, nil
	}
	files, ok, err := lookupFontCache(base, key)
	if err != nil {
		note("%v", err)
		return jail.Provision{}, nil
	}
	if !ok {
		if files, err = buildFontCache(ctx, spec, base, key); err != nil {
			note("build for %s: %v (each plot rebuilds it)", root, err)
			return jail.Provision{}, nil
		}
	}
	p := jail.Provision{
		Binds: []jail.Bind{{Source: filepath.Join(base, key), Dest: FontCacheDir}},
		Dirs:  []string{MPLConfigDir},
		Env:   []string{"MPLCONFIGDIR=" + MPLConfigDir},
	}
	for _, f := range files {
		p.Links = append(p.Links, jail.Link{Dest: path.Join(MPLConfigDir, f), Target: path.Join(FontCacheDir, f)})
	}
	return p, nil
}

// fontCacheBase is where the font caches of this stockade are kept: the
// host's CacheDir, else host root's cache directory, else the user's
// (userFontCacheDir), else, for a user without a home of their own,
// the user's stockade directory (runlock.UserDir), which lasts at least
// until the next reboot or logout; "" (no cache) when that one is not the
// user's (squatted in the temp directory: the run said so already), since
// its owner could swap the cache for one of their own between the check
// and the bind. Root of a user namespace is not host root:
// /var/cache/stockade is not its to write.
func fontCacheBase(host jail.Host) string {
	switch {
	case host.CacheDir != "":
		return filepath.Join(host.CacheDir, "matplotlib")
	case runlock.HostRoot():
		return rootFontCacheDir
	}
	if d := userFontCacheDir(); d != "" {
		return d
	}
	d := filepath.Join(runlock.UserDir(), "matplotlib")
	if runlock.EnsureOwnedDir(d, 0o755, 0) != nil {
		return ""
	}
	return d
}

// buildFontCache runs matplotlib in a jail of the same root, with the
// default limits, to build the cache, and stores what it printed. The jail
// writes nothing on the host: the cache comes back as checked JSON on its
// stdout, and stockade stores it where only stockade's user can write.
func buildFontCache(ctx context.Context, spec jail.Spec, base, key string) ([]string, error) {
	unlock, err := lockFontCache(base)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if files, ok, err := lookupFontCache(base, key); err != nil || ok {
		return files, err // built by a concurrent run while we waited
	}
	// MPLCONFIGDIR in the build's environment also keeps this run from
	// looking for the cache it is building; and it gets no provisions at
	// all, so no provider of the host can make it wait on itself.
	host := spec.Host
	host.Providers = nil
	build := jail.Spec{
		Args:        []string{"python3", "-I", "-c", fontCacheScript},
		Env:         []string{"MPLCONFIGDIR=/tmp/mplbuild", "MPLBACKEND=Agg", "OPENBLAS_NUM_THREADS=1"},
		Timeout:     fontCacheBuildTimeout,
		OutputLimit: 32 << 20,
		Rootfs:      spec.Rootfs,
		TmpfsSize:   64 << 20,
		WorkdirMode: jail.WorkdirNone,
		WorkSize:    16 << 20,
		Hostname:    spec.Hostname,
		Rlimits:     jail.Rlimits{OpenFiles: 256, FileSize: 64 << 20},
		Cgroup:      jail.CgroupSpec{MemoryMax: 512 << 20, CPUs: 1, PidsMax: 64},
		Seccomp:     spec.Seccomp,
		Host:        host,
	}
	res, err := jail.Run(ctx, build, jail.Streams{})
	if err != nil {
		return nil, err
	}
	if res.Verdict != jail.VerdictOK {
		return nil, fmt.Errorf("python3 ended with %s (exit %d): %s", res.Verdict, res.ExitCode, strings.TrimSpace(lastLine(res.Stderr)))
	}
	files, err := parseFontCache([]byte(res.Stdout))
	if err != nil {
		return nil, err
	}
	if err := storeFontCache(base, key, files); err != nil {
		return nil, err
	}
	names, _, err := lookupFontCache(base, key)
	return names, err
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
