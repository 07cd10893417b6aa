package e2e

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stockade/stockade/internal/certtest"
	"github.com/stockade/stockade/internal/clitest"
)

// asUser runs the built stockade as uid/gid with no supplementary groups
// and a clean environment.
func asUser(t *testing.T, bin string, uid, gid int, args ...string) (int, string, string) {
	t.Helper()
	return asUserEnv(t, bin, uid, gid, nil, args...)
}

func asUserEnv(t *testing.T, bin string, uid, gid int, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=/nonexistent", "LANG=C.UTF-8"}, env...)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}}
	return clitest.RunExit(t, cmd)
}

// v1Delegation does what `stockade doctor` tells the admin for cgroup v1:
// a directory in each controller hierarchy, chowned to the user, at one
// relative path. Ours lives below this process's own memory cgroup (in the
// others our cgroup is the root) and is removed after. It returns the
// --cgroup-parent path.
func v1Delegation(t *testing.T, name string, uid, gid int) string {
	t.Helper()
	rel := filepath.Join(clitest.OwnV1MemoryCgroup(t, "needs a cgroup v1 memory hierarchy (the VM covers v2)"), "stockade-"+name)
	for _, dir := range clitest.MakeV1Cgroups(t, rel, []string{"memory", "cpu", "cpuacct", "pids", "freezer"}, nil) {
		for _, p := range []string{dir, filepath.Join(dir, "cgroup.procs"), filepath.Join(dir, "tasks")} {
			if err := os.Chown(p, uid, gid); err != nil {
				t.Fatal(err)
			}
		}
	}
	return rel
}

// A normal user with a cgroup v1 delegation as `stockade doctor` describes
// it gets the full jail: memory limit enforced with verdict memory, every
// door of the selftest held, nothing left in the delegated cgroup. Without
// the delegation, run and selftest stop with the way to get one.
func TestRootlessWithDelegatedV1Cgroup(t *testing.T) {
	bin := clitest.BuiltBinary(t)
	name, uid, gid := clitest.ThrowawayUser(t)

	code, _, errs := asUser(t, bin, uid, gid, "run", "--", "python3", "-c", "print('JAIL' + 'RAN')")
	if code != 125 || !strings.Contains(errs, "a normal user needs a delegated cgroup: `stockade doctor` prints how to get one") {
		t.Fatalf("undelegated run: exit %d, stderr %q", code, errs)
	}
	// In a systemd unit (INVOCATION_ID set), the fix is the unit's setting.
	code, _, errs = asUserEnv(t, bin, uid, gid, []string{"INVOCATION_ID=0123456789abcdef"}, "run", "--", "true")
	if code != 125 || !strings.Contains(errs, "add Delegate=memory pids cpu to its [Service] section") {
		t.Fatalf("undelegated run in a unit: exit %d, stderr %q", code, errs)
	}
	code, out, _ := asUser(t, bin, uid, gid, "doctor")
	if code != 1 || !strings.Contains(out, "chown "+name+": $d $d/cgroup.procs $d/tasks") ||
		!strings.Contains(out, "--cgroup-parent stockade-"+name) {
		t.Fatalf("doctor: exit %d, output\n%s", code, out)
	}
	code, _, errs = asUser(t, bin, uid, gid, "selftest")
	if code != 125 || !strings.Contains(errs, "selftest: could not start a jail: cgroup:") {
		t.Fatalf("undelegated selftest: exit %d, stderr %q", code, errs)
	}

	parent := v1Delegation(t, name, uid, gid)
	code, out, errs = asUser(t, bin, uid, gid, "run", "--cgroup-parent", parent, "--memory", "64M", "--json", "--",
		"python3", "-c", "import os; print(os.getuid()); bytearray(200 << 20)")
	var res struct {
		Verdict, Cgroup, Stdout string
		Degraded                []string
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("exit %d, %q, %q", code, out, errs)
	}
	if res.Verdict != "memory" || res.Cgroup != "v1" || res.Stdout != "1000\n" || len(res.Degraded) != 0 {
		t.Fatalf("delegated run: exit %d, result %s, stderr %q", code, out, errs)
	}

	code, out, errs = asUser(t, bin, uid, gid, "selftest", "--cgroup-parent", parent, "--json")
	var rep clitest.SelftestReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("selftest: exit %d, %q, %q", code, out, errs)
	}
	for _, r := range rep.Rows {
		if r.Status == "FAIL" {
			t.Errorf("rootless selftest: %s / %s: %s", r.Door, r.Attack, r.Happened)
		}
	}
	if code != 0 || rep.Cgroup != "on" || rep.Passed < 40 {
		t.Fatalf("rootless selftest: exit %d, cgroup %s, %d passed, %d failed", code, rep.Cgroup, rep.Passed, rep.Failed)
	}
	for _, c := range []string{"memory", "cpu", "pids"} {
		left, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", c, parent, "stockade-*"))
		if len(left) != 0 {
			t.Errorf("left in the delegated cgroup: %v", left)
		}
	}
}

// A normal user who followed doctor's advice (a v1 delegation used with
// --cgroup-parent, or --no-cgroup) must be able to check that very
// configuration with doctor: it takes the flags run takes, says to pass
// them, and then tries the default jail as run will.
func TestDoctorChecksTheCgroupTheUserWillRunIn(t *testing.T) {
	bin := clitest.BuiltBinary(t)
	name, uid, gid := clitest.ThrowawayUser(t)
	parent := v1Delegation(t, name, uid, gid)

	code, out, _ := asUser(t, bin, uid, gid, "doctor")
	if code != 1 || !strings.Contains(out, "default jail: FAILED") ||
		!strings.Contains(out, "stockade doctor --cgroup-parent stockade-"+name) {
		t.Errorf("doctor without the flag: exit %d, output\n%s", code, out)
	}
	code, out, errs := asUser(t, bin, uid, gid, "doctor", "--cgroup-parent", parent)
	if code != 0 || !strings.Contains(out, "default jail: ok (cgroup v1,") ||
		!strings.Contains(out, "cgroup memory: usable, groups under /sys/fs/cgroup/memory"+parent) {
		t.Errorf("doctor --cgroup-parent %s: exit %d, stderr %q, output\n%s", parent, code, errs, out)
	}
	code, out, errs = asUser(t, bin, uid, gid, "doctor", "--no-cgroup")
	if code != 0 || !strings.Contains(out, "default jail: ok (cgroup none,") || !strings.Contains(out, "degraded: cgroup: none") {
		t.Errorf("doctor --no-cgroup: exit %d, stderr %q, output\n%s", code, errs, out)
	}
	for _, c := range []string{"memory", "cpu", "pids"} {
		left, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", c, parent, "stockade*"))
		if len(left) != 0 {
			t.Errorf("left in the delegated cgroup: %v", left)
		}
	}
}

// `stockade serve` as a normal user without a delegated cgroup stops at
// once with the way to get one; it used to listen and answer every run
// with verdict error, naming --no-cgroup, a flag serve does not have. No
// socket is left behind. With the delegation it starts.
func TestRootlessServeWithoutCgroupRefusesAtStart(t *testing.T) {
	name, uid, gid := clitest.ThrowawayUser(t)
	dir := t.TempDir()
	if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil { // the user reaches its own dir
		t.Fatal(err)
	}
	// The binary where the user can run it (STOCKADE_BIN may be below a
	// directory of root's alone, as in scripts/mutate's copy).
	b, err := os.ReadFile(clitest.BuiltBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(filepath.Dir(dir), "stockade")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "s.sock")
	code, _, errs := asUser(t, bin, uid, gid, "serve", "--socket", sock, "--pool", "0")
	if code != 125 || !strings.Contains(errs, "serve: the jails' cgroup:") ||
		!strings.Contains(errs, "--cgroup-parent PATH or $STOCKADE_CGROUP_PARENT") || strings.Contains(errs, "--no-cgroup") {
		t.Fatalf("serve without a cgroup: exit %d, stderr %q", code, errs)
	}
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Fatalf("the refused serve left its socket: %v", err)
	}
	// With the delegation, the check passes: serve gets as far as its
	// flags (a --pool that is refused after the cgroup check).
	parent := v1Delegation(t, name, uid, gid)
	code, _, errs = asUser(t, bin, uid, gid, "serve", "--socket", sock, "--cgroup-parent", parent, "--drain-sessions", "5s")
	if code != 125 || strings.Contains(errs, "cgroup") || !strings.Contains(errs, "--drain-sessions is for a node") {
		t.Fatalf("serve with a delegated cgroup: exit %d, stderr %q", code, errs)
	}
}

// `stockade gateway` as its own user, given a tenants file an admin made
// as root (0600, so the user cannot open it): the refusal names the
// user's uid and the fix, not only "permission denied".
func TestRootlessGatewayNamesTheTenantsFileFix(t *testing.T) {
	_, uid, gid := clitest.ThrowawayUser(t)
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} { // the user reaches the binary and its key
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(clitest.BuiltBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	bin := certtest.WriteFile(t, dir, "stockade", b, 0o755)
	ca := certtest.NewCA(t, "gateway test CA")
	leaf := ca.Issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "gw"}, DNSNames: []string{"localhost"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	cert := certtest.WriteFile(t, dir, "gw.crt", leaf.CertPEM, 0o644)
	key := certtest.WriteFile(t, dir, "gw.key", leaf.KeyPEM, 0o600)
	if err := os.Chown(key, uid, gid); err != nil {
		t.Fatal(err)
	}
	tenants := certtest.WriteFile(t, dir, "tenants.toml", []byte("[tenant.a]\ntokens = [\""+strings.Repeat("ab", 20)+"\"]\n"), 0o600)
	code, _, errs := asUser(t, bin, uid, gid, "gateway", "--listen", "127.0.0.1:0", "--cert", cert, "--key", key, "--tenants", tenants, "--cluster", "/nonexistent")
	if code != 125 || !strings.Contains(errs, "permission denied") || !strings.Contains(errs, fmt.Sprintf("the gateway runs as uid %d", uid)) || !strings.Contains(errs, "chmod 600") {
		t.Fatalf("a root-owned tenants file: exit %d, stderr %q", code, errs)
	}
}
