package jail

import (
	"context"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/stockade/stockade/internal/runlock"
	"github.com/stockade/stockade/jail/internal/jailinit"
	"github.com/stockade/stockade/mplcache"
)

// fontCacheBuildTimeout bounds the one run that builds a root's matplotlib
// font cache (about a second on a desktop's fonts).
const fontCacheBuildTimeout = 2 * time.Minute

// fontCacheSteps returns the plan steps that give the jail matplotlib's
// font cache for its root (see package mplcache), building the cache first
// if this host has none for the root yet; nil when the root has no
// matplotlib. A cache that cannot be found or built costs the run nothing
// but matplotlib's own rebuild, so failures are notices, not errors.
func fontCacheSteps(ctx context.Context, spec Spec, notices io.Writer) []jailinit.Step {
	note := func(format string, a ...any) {
		if notices != nil {
			fmt.Fprintf(notices, "stockade: matplotlib font cache: "+format+"\n", a...)
		}
	}
	root := "/"
	if spec.Rootfs != RootfsHost {
		root = spec.Rootfs
	}
	key, ok, err := mplcache.Key(root)
	if err != nil {
		note("%v", err)
		return nil
	}
	if !ok {
		return nil
	}
	base := fontCacheBase(spec)
	if base == "" {
		return nil
	}
	files, ok, err := mplcache.Lookup(base, key)
	if err != nil {
		note("%v", err)
		return nil
	}
	if !ok {
		if files, err = buildFontCache(ctx, spec, base, key); err != nil {
			note("build for %s: %v (each plot rebuilds it)", root, err)
			return nil
		}
	}
	steps := []jailinit.Step{
		{Kind: jailinit.StepBind, Dest: mplcache.BoundDir, Source: filepath.Join(base, key), Dir: true},
		{Kind: jailinit.StepDir, Dest: mplcache.ConfigDir, Mode: 0o755},
	}
	for _, f := range files {
		steps = append(steps, jailinit.Step{Kind: jailinit.StepSymlink, Dest: path.Join(mplcache.ConfigDir, f), Link: path.Join(mplcache.BoundDir, f)})
	}
	return steps
}

// fontCacheBase is where the font caches of this stockade are kept: the
// host's CacheDir, else host root's cache directory, else the user's
// (mplcache.UserBaseDir), else, for a user without a home of their own,
// the user's stockade directory (runlock.UserDir), which lasts at least
// until the next reboot or logout; "" (no cache) when that one is not the
// user's (squatted in the temp directory: the run said so already), since
// its owner could swap the cache for one of their own between the check
// and the bind. Root of a user namespace is not host root:
// /var/cache/stockade is not its to write.
func fontCacheBase(spec Spec) string {
	switch {
	case spec.Host.CacheDir != "":
		return filepath.Join(spec.Host.CacheDir, "matplotlib")
	case runlock.HostRoot():
		return mplcache.RootBaseDir
	}
	if d := mplcache.UserBaseDir(); d != "" {
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
func buildFontCache(ctx context.Context, spec Spec, base, key string) ([]string, error) {
	unlock, err := mplcache.Lock(base)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if files, ok, err := mplcache.Lookup(base, key); err != nil || ok {
		return files, err // built by a concurrent run while we waited
	}
	// MPLCONFIGDIR in the build's environment also keeps this run from
	// looking for the cache it is building.
	build := Spec{
		Args:        []string{"python3", "-I", "-c", mplcache.BuildScript},
		Env:         []string{"MPLCONFIGDIR=/tmp/mplbuild", "MPLBACKEND=Agg", "OPENBLAS_NUM_THREADS=1"},
		Timeout:     fontCacheBuildTimeout,
		OutputLimit: 32 << 20,
		Rootfs:      spec.Rootfs,
		TmpfsSize:   64 << 20,
		WorkdirMode: WorkdirNone,
		WorkSize:    16 << 20,
		Hostname:    spec.Hostname,
		Rlimits:     Rlimits{OpenFiles: 256, FileSize: 64 << 20},
		Cgroup:      CgroupSpec{MemoryMax: 512 << 20, CPUs: 1, PidsMax: 64},
		Seccomp:     spec.Seccomp,
		Host:        spec.Host,
	}
	res, err := Run(ctx, build, Streams{})
	if err != nil {
		return nil, err
	}
	if res.Verdict != VerdictOK {
		return nil, fmt.Errorf("python3 ended with %s (exit %d): %s", res.Verdict, res.ExitCode, strings.TrimSpace(lastLine(res.Stderr)))
	}
	files, err := mplcache.Parse([]byte(res.Stdout))
	if err != nil {
		return nil, err
	}
	if err := mplcache.Store(base, key, files); err != nil {
		return nil, err
	}
	names, _, err := mplcache.Lookup(base, key)
	return names, err
}

// fontCacheEnv points matplotlib at the config directory the steps make.
func fontCacheEnv(steps []jailinit.Step) []string {
	for _, s := range steps {
		if s.Dest == mplcache.ConfigDir {
			return []string{"MPLCONFIGDIR=" + mplcache.ConfigDir}
		}
	}
	return nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
