package jail

import (
	"fmt"
	"path"
)

// Host is what belongs to the machine stockade runs on, not to one run or
// its policy: where runs' cgroups go, how the host itself reaches the
// network, and where stockade keeps what it builds once per host. A
// process builds it once (DefaultHost, then the command's own flags) and
// hands the same value to every run it makes, through Spec.Host; `stockade
// run`, `serve`, `selftest` and `doctor` share it so that none of them
// forgets one. The zero value is the defaults, looked up when a run starts.
// (The run lock and run directories are the user's, resolved in one place
// each: runlock.DefaultDir, with STOCKADE_LOCK_DIR, and RunBase.)
type Host struct {
	// CgroupParent is where runs' cgroups are created ("" is the cgroup
	// stockade runs in; see cgroup.Options.Parent).
	CgroupParent string
	// NoCgroup runs without a cgroup (--no-cgroup): rlimits only, the
	// memory, CPU and pids limits neither enforced nor reported, and the
	// result says so in Degraded.
	NoCgroup bool
	// UpstreamProxy is stockade's own proxy (an http:// URL, its
	// HTTPS_PROXY) for the egress proxy's dials; a jail never sees it.
	UpstreamProxy string
	// UpstreamDecides says UpstreamProxy is a stockade egress proxy with
	// the same rules that decides again (the VM tier's host side, for
	// the proxy in its guest): an allowed request goes to it as the jail
	// made it, the name unresolved, for it to resolve, check and dial
	// (netproxy.Config.Relay).
	UpstreamDecides bool
	// HostsFile, when set, resolves allowlisted names from this hosts(5)
	// file instead of DNS (tests and the selftest point names at their
	// fixtures this way; every address still passes every check).
	HostsFile string
	// CacheDir is where stockade keeps what it builds once per host and
	// binds read-only into jails (package pydata's matplotlib font cache,
	// in its matplotlib/): "" is /var/cache/stockade for host root and the
	// user's own cache directory for anyone else.
	CacheDir string
	// TracePhases times every step of a run, stockade's and its init's,
	// into Result.Phases (`stockade run --phases`); off, no clock is read
	// for it.
	TracePhases bool
	// Providers add what the host keeps for a jail (package pydata's
	// font cache) to every jail, as plain mount steps (see Provider).
	// stockade's commands set pydata's; a library caller adds it for the
	// same plots, or leaves it out (matplotlib then builds its cache in
	// each run).
	Providers []Provider
}

func (h Host) validate() error {
	if h.CacheDir != "" && (!path.IsAbs(h.CacheDir) || path.Clean(h.CacheDir) != h.CacheDir) {
		return fmt.Errorf("host: cache directory %q: must be an absolute, clean path", h.CacheDir)
	}
	return nil
}
