package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stockade/stockade/internal/clitest"
)

// The outer ids the test namespaces map: far from any real user and from
// the ids stockade gives jails on the host.
const nsBase = 3 << 28

// containerCmd runs bin as root of a new user namespace with the given
// maps, in a mount namespace of its own with fresh /run and /tmp as a
// container has (the host's belong to ids the namespace does not map).
// The binary is copied into the new /run first: a clone of this repository
// may itself live below /tmp, which the fresh tmpfs hides.
func containerCmd(bin string, uidMap, gidMap []syscall.SysProcIDMap, args ...string) *exec.Cmd {
	cmd := exec.Command("/bin/sh", append([]string{"-c",
		`exec 3<"$0" && mount -t tmpfs -o mode=755 tmpfs /run && cat <&3 >/run/stockade-under-test && exec 3<&- && ` +
			`chmod 755 /run/stockade-under-test && mount -t tmpfs -o mode=1777 tmpfs /tmp && exec /run/stockade-under-test "$@"`, bin}, args...)...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "TMPDIR=/tmp"}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UidMappings: uidMap, GidMappings: gidMap,
		GidMappingsEnableSetgroups: true,
		Credential:                 &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: true},
	}
	return cmd
}

// inUserNamespace runs stockade as root of a new user namespace with the
// given maps (and all capabilities there, as a container runtime's root
// in a user namespace has), like rootless podman or a CI runner.
func inUserNamespace(t *testing.T, bin string, uidMap, gidMap []syscall.SysProcIDMap, args ...string) (int, string, string) {
	t.Helper()
	return clitest.RunExit(t, containerCmd(bin, uidMap, gidMap, args...))
}

// jailIDs is what the jailed code reports about itself.
const jailIDs = `import os; print(os.getuid(), os.getgid(), open("/proc/self/uid_map").read().split(), open("/proc/self/gid_map").read().split(), os.getgroups())`

func runIDs(t *testing.T, bin string, uidMap, gidMap []syscall.SysProcIDMap) (string, map[string]any) {
	t.Helper()
	code, out, errb := inUserNamespace(t, bin, uidMap, gidMap,
		"run", "--no-cgroup", "--json", "--", "python3", "-c", jailIDs)
	var res map[string]any
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 0 {
		t.Fatalf("exit %d, result %q, stderr %q", code, out, errb)
	}
	return strings.TrimSpace(res["stdout"].(string)), res
}

// The rootless-podman / CI-runner shape: the container's user namespace
// maps only its root, to an unprivileged host id. stockade must map the jail
// user to that id (the only one there is), not to 2^30, which does not
// exist in the namespace (lchown: invalid argument).
func TestIdentityInUserNamespaceMappingOnlyItsRoot(t *testing.T) {
	bin := clitest.BuiltBinary(t)
	m := []syscall.SysProcIDMap{{ContainerID: 0, HostID: nsBase, Size: 1}}
	got, _ := runIDs(t, bin, m, m)
	// Seen from the jail: uid 1000 is id 0 of the namespace above.
	if want := "1000 1000 ['1000', '0', '1'] ['1000', '0', '1'] []"; got != want {
		t.Fatalf("jail saw %q, want %q", got, want)
	}
}

// Rootless podman with subordinate ids: the jail gets the highest mapped
// id, not the namespace's root and not an id that is not there.
func TestIdentityInUserNamespaceWithSubordinateIDs(t *testing.T) {
	bin := clitest.BuiltBinary(t)
	m := []syscall.SysProcIDMap{{ContainerID: 0, HostID: nsBase, Size: 1}, {ContainerID: 1, HostID: nsBase + 1, Size: 65536}}
	got, _ := runIDs(t, bin, m, m)
	if want := "1000 1000 ['1000', '65536', '1'] ['1000', '65536', '1'] []"; got != want {
		t.Fatalf("jail saw %q, want %q", got, want)
	}
}

// A user namespace whose only id is host root: there is no unprivileged id
// to give the jail, and it must not get root. One line, exit 125.
func TestAttackIdentityNamespaceMappingOnlyHostRoot(t *testing.T) {
	bin := clitest.BuiltBinary(t)
	m := []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}}
	cmd := containerCmd(bin, m, m, "run", "--no-cgroup", "--", "python3", "-c", "print('JAIL' + 'RAN')")
	out, err := cmd.CombinedOutput()
	ee, _ := err.(*exec.ExitError)
	if ee == nil || ee.ExitCode() != 125 || strings.Contains(string(out), "JAILRAN") ||
		!strings.Contains(string(out), "no unprivileged uid to map the jail user to") || strings.Count(strings.TrimSpace(string(out)), "\n") != 0 {
		t.Fatalf("err %v, output %q: want exit 125 and one line naming the missing id", err, out)
	}
}

// Root without CAP_SETUID, CAP_SETGID and CAP_CHOWN (runc's default
// capability set): stockade could only map the jail to itself, which is
// host root. It must refuse in one line naming the capabilities and the
// flag, not fail later at lchown.
func TestAttackIdentityRootWithoutMappingCapabilities(t *testing.T) {
	bin := clitest.BuiltBinary(t)
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("needs setpriv (util-linux)")
	}
	cmd := exec.Command(setpriv, "--bounding-set=-setuid,-setgid,-chown", "--inh-caps=-all", "--",
		bin, "run", "--no-cgroup", "--", "python3", "-c", "print('JAIL' + 'RAN')")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "TMPDIR=" + filepath.Clean(os.TempDir())}
	out, err := cmd.CombinedOutput()
	ee, _ := err.(*exec.ExitError)
	if ee == nil || ee.ExitCode() != 125 || strings.Contains(string(out), "JAILRAN") ||
		!strings.Contains(string(out), "--cap-add=SETUID") || !strings.Contains(string(out), "CAP_CHOWN") {
		t.Fatalf("err %v, output %q: want exit 125 naming the missing capabilities and the fix", err, out)
	}
}
