package jail

import (
	"fmt"
	"os"
	"strings"

	"github.com/stockade/stockade/internal/hostenv"
	"golang.org/x/sys/unix"
)

// identity is who the jail user is on the host.
type identity struct {
	hostUID, hostGID int
	setGroups        bool
}

// chooseIdentity maps the jail user. With the power to map any id (root
// with CAP_SETUID, CAP_SETGID and CAP_CHOWN in stockade's own user
// namespace): to an unprivileged id that namespace has (see pickJailID), or
// with --workdir to the directory's owner, so the jail can write there
// without stockade chowning anyone's files. Without it (a normal user, or
// root in a container that dropped those capabilities): to stockade's own
// ids, the only mapping an unprivileged user namespace allows, and never
// when those are root of the namespace above.
//
// The id wanted for a root stockade is the run's own, HostIDFor(n); it
// is the preference pickJailID starts from.
func chooseIdentity(spec Spec, n int, pol sourcePolicy) (identity, error) {
	env, err := currentIDEnv()
	if err != nil {
		return identity{}, err
	}
	env.preferred = HostIDFor(n)
	return chooseIdentityIn(spec, env, pol)
}

// idEnv is what decides the jail user's mapping: stockade's own ids, the
// maps of its user namespace, and whether it may map ids other than its own.
type idEnv struct {
	uid, gid int
	// preferred is the id a root stockade gives the jail when the
	// namespace has it (0: HostID).
	preferred      int
	uidMap, gidMap hostenv.IDMap
	// missingCaps are the mapping capabilities root lacks; empty when
	// stockade is not root or has them all.
	missingCaps []string
	// setgroupsDenied: /proc/self/setgroups says "deny", which a nested
	// namespace inherits and cannot undo, so init must not call setgroups.
	setgroupsDenied bool
	// setfcap: CAP_SETFCAP is effective, which mapping root of the
	// namespace above requires.
	setfcap bool
	// groups are stockade's supplementary groups, which the jail keeps
	// whenever init cannot clear them.
	groups []int
}

func (e idEnv) want() int {
	if e.preferred == 0 {
		return HostID
	}
	return e.preferred
}

func (e idEnv) privileged() bool { return e.uid == 0 && len(e.missingCaps) == 0 }

func currentIDEnv() (idEnv, error) {
	env := idEnv{uid: os.Getuid(), gid: os.Getgid()}
	var err error
	if env.groups, err = os.Getgroups(); err != nil {
		return env, fmt.Errorf("getgroups: %w", err)
	}
	if env.uidMap, err = hostenv.ReadIDMap("/proc/self/uid_map"); err != nil {
		return env, err
	}
	if env.gidMap, err = hostenv.ReadIDMap("/proc/self/gid_map"); err != nil {
		return env, err
	}
	if env.uid == 0 {
		if env.missingCaps, err = hostenv.MissingMappingCaps(); err != nil {
			return env, err
		}
	}
	if env.setfcap, err = hostenv.HasEffectiveCap(unix.CAP_SETFCAP); err != nil {
		return env, err
	}
	// Absent before Linux 3.19: setgroups is then allowed.
	if b, err := os.ReadFile("/proc/self/setgroups"); err == nil {
		env.setgroupsDenied = strings.TrimSpace(string(b)) == "deny"
	}
	return env, nil
}

func chooseIdentityIn(spec Spec, env idEnv, pol sourcePolicy) (identity, error) {
	id, err := pickIdentity(spec, env, pol)
	if err == nil && id.hostUID == 0 && !env.setfcap {
		// Since Linux 5.12 a map that holds root of the namespace above
		// needs CAP_SETFCAP there: a file capability written by such a
		// namespace would otherwise hold above it.
		return id, fmt.Errorf("the jail must become this user namespace's root, the only id it maps (uid_map: %s), and the kernel allows that mapping only with CAP_SETFCAP, which stockade lacks; fix: grant the container CAP_SETFCAP (docker/podman --cap-add=SETFCAP; runc/crun: process.capabilities), or map more ids into it (podman --userns=auto)", env.uidMap.Describe())
	}
	return id, err
}

func pickIdentity(spec Spec, env idEnv, pol sourcePolicy) (identity, error) {
	id := identity{hostUID: env.uid, hostGID: env.gid}
	if !env.privileged() || env.setgroupsDenied {
		// The jail keeps these groups: none may be root above.
		for _, g := range env.groups {
			if !env.gidMap.Usable(g) {
				return id, fmt.Errorf("stockade holds supplementary group %d, which is root of the namespace above or unmapped (gid_map: %s), and cannot drop it for the jail (setgroups is denied in this user namespace or stockade lacks CAP_SETGID); start stockade without that group, or in a user namespace whose setgroups is \"allow\"", g, env.gidMap.Describe())
			}
		}
	}
	if !env.privileged() {
		if !env.uidMap.Usable(env.uid) || !env.gidMap.Usable(env.gid) {
			return id, unprivilegedRootError(env)
		}
		if spec.Workdir != "" {
			if _, err := pol.checkWorkdir(spec.Workdir); err != nil {
				return id, workdirError(err)
			}
		}
		return id, nil
	}
	id.setGroups = !env.setgroupsDenied
	if spec.Workdir != "" {
		fi, err := pol.checkWorkdir(spec.Workdir)
		if err != nil {
			return id, workdirError(err)
		}
		if err := pol.checkOwner(spec.Workdir, fi.Uid); err != nil {
			return id, workdirError(err)
		}
		if !env.uidMap.Usable(int(fi.Uid)) {
			return id, workdirError(fmt.Errorf("--workdir %s is owned by uid %d, which this user namespace does not map to an unprivileged id (uid_map: %s); chown it to a mapped unprivileged uid", spec.Workdir, fi.Uid, env.uidMap.Describe()))
		}
		id.hostUID, id.hostGID = int(fi.Uid), int(fi.Gid)
		if fi.Gid == 0 || !env.gidMap.Usable(int(fi.Gid)) {
			// Host root is never mapped, the group included.
			gid, ok := pickJailID(env.gidMap, env.want())
			if !ok {
				return id, noJailIDError("gid", env.gidMap)
			}
			id.hostGID = gid
		}
		return id, nil
	}
	uid, ok := pickJailID(env.uidMap, env.want())
	if !ok {
		return id, noJailIDError("uid", env.uidMap)
	}
	gid, ok := pickJailID(env.gidMap, env.want())
	if !ok {
		return id, noJailIDError("gid", env.gidMap)
	}
	id.hostUID, id.hostGID = uid, gid
	return id, nil
}

func workdirError(err error) error {
	return &SetupError{Step: "workdir", Message: err.Error(), ExitCode: ExitJailError}
}

func noJailIDError(kind string, m hostenv.IDMap) error {
	return fmt.Errorf("no unprivileged %s to map the jail user to: this user namespace maps only %s (/proc/self/%s_map: inside outside count), and the jail never runs as root of the namespace above; map at least one id other than host root into the container (e.g. podman --userns=auto, or a uidMappings range in the runtime config)", kind, m.Describe(), kind)
}

// unprivilegedRootError explains the one identity stockade cannot use: its
// own, when that is root above. Without the mapping capabilities the kernel
// lets it map only its own ids into the jail.
func unprivilegedRootError(env idEnv) error {
	if env.uid == 0 {
		return fmt.Errorf("stockade runs as root without %s (a container runtime's default capability set drops them), so it can map the jail only to itself, and root here is root of the namespace above (uid_map: %s); fix: grant the container CAP_SETUID, CAP_SETGID and CAP_CHOWN (docker/podman run --cap-add=SETUID --cap-add=SETGID --cap-add=CHOWN; runc/crun: add them to process.capabilities in config.json), or run stockade as a non-root user",
			strings.Join(env.missingCaps, ", "), env.uidMap.Describe())
	}
	return fmt.Errorf("uid %d/gid %d is root of the namespace above (uid_map: %s; gid_map: %s), and the jail never runs as that; run stockade as a user that is unprivileged outside this namespace", env.uid, env.gid, env.uidMap.Describe(), env.gidMap.Describe())
}
