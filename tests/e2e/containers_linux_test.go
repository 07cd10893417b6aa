package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stockade/stockade/internal/clitest"
)

// ociShape is one way a CI system or Kubernetes starts a container,
// applied to the runtime's own default config (`runc spec`).
type ociShape struct {
	name string
	// privileged: every capability, nothing masked in /proc, cgroupfs and
	// /sys read-write (docker run --privileged).
	privileged bool
	// addCaps are added to the default capability set.
	addCaps []string
	// unmask empties maskedPaths and readonlyPaths
	// (--security-opt systempaths=unconfined).
	unmask bool
	// rootOnly: a user namespace mapping only the container's root to an
	// unprivileged host id (rootless podman, many CI runners).
	rootOnly bool
	// cgroupNS: a private cgroup namespace; cgroupRW its cgroupfs
	// mounted read-write.
	cgroupNS, cgroupRW bool
}

var (
	mappingCapNames = []string{"CAP_SETUID", "CAP_SETGID", "CAP_CHOWN"}
	// podman's and docker's default sets have CAP_SETFCAP; runc's has not.
	withSetfcap = append([]string{"CAP_SETFCAP"}, mappingCapNames...)
)

// ociBundle writes a bundle for shape: the image is a directory whose
// /usr and /etc are the host's (read-only), with the stockade under test
// at /stockade/stockade. Nothing is pulled from a registry.
func ociBundle(t *testing.T, runc, bin string, shape ociShape, cgroupsPath string, args ...string) string {
	t.Helper()
	bundle := t.TempDir()
	if out, err := exec.Command(runc, "spec", "--bundle", bundle).CombinedOutput(); err != nil {
		t.Fatalf("runc spec: %v: %s", err, out)
	}
	root := filepath.Join(bundle, "rootfs")
	for _, d := range []string{"usr", "etc", "tmp", "run", "proc", "sys", "dev", "stockade"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range []string{"bin", "lib", "lib64", "sbin"} {
		if _, err := os.Lstat(filepath.Join("/", l)); err == nil {
			os.Symlink("usr/"+l, filepath.Join(root, l))
		}
	}
	b, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	c["root"] = map[string]any{"path": "rootfs", "readonly": true}
	proc := c["process"].(map[string]any)
	proc["args"] = append([]string{"/stockade/stockade"}, args...)
	proc["terminal"] = false
	proc["env"] = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "TMPDIR=/tmp", "LANG=C.UTF-8", "HOME=/tmp"}
	linux := c["linux"].(map[string]any)
	linux["cgroupsPath"] = cgroupsPath
	mounts := c["mounts"].([]any)
	mounts = append(mounts,
		map[string]any{"destination": "/usr", "type": "bind", "source": "/usr", "options": []string{"rbind", "ro"}},
		map[string]any{"destination": "/etc", "type": "bind", "source": "/etc", "options": []string{"rbind", "ro"}},
		map[string]any{"destination": "/stockade", "type": "bind", "source": filepath.Dir(bin), "options": []string{"rbind", "ro"}},
		map[string]any{"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": []string{"nosuid", "nodev", "mode=1777"}},
		map[string]any{"destination": "/run", "type": "tmpfs", "source": "tmpfs", "options": []string{"nosuid", "nodev", "mode=755"}})
	caps := proc["capabilities"].(map[string]any)
	setCaps := func(f func([]string) []string) {
		for k, v := range caps {
			caps[k] = f(strs(v))
		}
	}
	ns := linux["namespaces"].([]any)
	if shape.privileged {
		all, err := exec.Command("sh", "-c", "capsh --print | sed -n 's/^Bounding set =//p'").Output()
		if err != nil || len(all) == 0 {
			t.Skip("needs capsh (libcap2-bin) to list every capability")
		}
		var names []string
		for _, n := range strings.Split(strings.TrimSpace(string(all)), ",") {
			names = append(names, strings.ToUpper(n))
		}
		setCaps(func([]string) []string { return names })
		shape.unmask, shape.cgroupRW = true, true
	}
	setCaps(func(cur []string) []string {
		for _, a := range shape.addCaps {
			if !slices.Contains(cur, a) {
				cur = append(cur, a)
			}
		}
		return cur
	})
	if shape.unmask {
		linux["maskedPaths"], linux["readonlyPaths"] = []string{}, []string{}
	}
	if shape.rootOnly {
		ns = append(ns, map[string]any{"type": "user"})
		m := []map[string]any{{"containerID": 0, "hostID": nsBase, "size": 1}}
		linux["uidMappings"], linux["gidMappings"] = m, m
	}
	if shape.cgroupNS {
		ns = append(ns, map[string]any{"type": "cgroup"})
	}
	linux["namespaces"] = ns
	for i, m := range mounts {
		mm := m.(map[string]any)
		opts := strs(mm["options"])
		switch mm["destination"] {
		case "/sys/fs/cgroup", "/sys":
			if shape.cgroupRW {
				opts = slices.DeleteFunc(opts, func(o string) bool { return o == "ro" })
			}
		case "/dev/pts":
			// gid 5 (tty) does not exist in a root-only namespace.
			if shape.rootOnly {
				opts = slices.DeleteFunc(opts, func(o string) bool { return o == "gid=5" })
			}
		}
		mm["options"] = opts
		mounts[i] = mm
	}
	c["mounts"] = mounts
	out, _ := json.MarshalIndent(c, "", " ")
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), out, 0o644); err != nil {
		t.Fatal(err)
	}
	if shape.rootOnly {
		// The runtime's root (host uid nsBase) must reach the image.
		os.Chmod(filepath.Dir(bundle), 0o755)
		os.Chmod(bundle, 0o755)
	}
	return bundle
}

// strs reads a JSON string array, as decoded or as set here.
func strs(v any) []string {
	if s, ok := v.([]string); ok {
		return s
	}
	var out []string
	a, _ := v.([]any)
	for _, x := range a {
		out = append(out, x.(string))
	}
	return out
}

// containerParent makes, in every v1 hierarchy, the directory the test's
// containers put their cgroups in: below this process's own memory cgroup
// (in the other hierarchies ours is the root), removed after.
func containerParent(t *testing.T, name string) string {
	t.Helper()
	rel := filepath.Join(clitest.OwnV1MemoryCgroup(t, "needs a cgroup v1 memory hierarchy"), name)
	var hierarchies []string
	ents, _ := os.ReadDir("/sys/fs/cgroup")
	for _, e := range ents {
		hierarchies = append(hierarchies, e.Name())
	}
	clitest.MakeV1Cgroups(t, rel, hierarchies, func(hierarchy, dir string) {
		if strings.HasPrefix(hierarchy, "cpuset") {
			// A new cpuset is empty; a task cannot join it until it has
			// cpus and mems.
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, _ := os.ReadFile(filepath.Join(filepath.Dir(dir), f))
				os.WriteFile(filepath.Join(dir, f), v, 0o644)
			}
		}
	})
	return rel
}

// runContainer runs one container to its end and returns its exit status
// and output.
func runContainer(t *testing.T, runc, bundle, id string) (int, string, string) {
	t.Helper()
	defer exec.Command(runc, "delete", "--force", id).Run()
	return clitest.RunExit(t, exec.Command(runc, "run", "--bundle", bundle, id))
}

// Each CI/Kubernetes container shape, started by real runtimes (runc, and
// crun on cgroup v2 hosts, from Debian) from a locally made image: either the full jail runs, or it runs
// with a degradation the user opted into, or stockade stops with one line
// naming the fix, and `stockade doctor` names the shape.
func TestCIContainerShapes(t *testing.T) {
	bin := clitest.BuiltBinary(t)
	var runtimes []string
	for _, r := range []string{"runc", "crun"} {
		if _, err := os.Stat("/sys/fs/cgroup/memory"); err == nil && r == "crun" {
			// crun refuses hybrid hosts ("cgroups in hybrid mode not
			// supported"); it runs the same shapes on cgroup v2.
			continue
		}
		if p, err := exec.LookPath(r); err == nil {
			runtimes = append(runtimes, p)
		}
	}
	if len(runtimes) == 0 {
		t.Skip("needs runc or crun (scripts/deps check installs them)")
	}
	parent := containerParent(t, fmt.Sprintf("stockade-ci-%d", os.Getpid()))
	bomb := []string{"run", "--memory", "64M", "--json", "--", "python3", "-c", "import os; print(os.getuid()); bytearray(200 << 20)"}
	noCgroup := []string{"run", "--no-cgroup", "--json", "--", "python3", "-c", "import os; print(os.getuid())"}
	cases := []struct {
		shape ociShape
		args  []string
		// verdict of a full or opted-in run; "" for a refusal.
		verdict  string
		degraded bool
		// refusal: a one-line message holding this fix.
		fix string
		// doctor names the shape with this.
		doctor string
	}{
		{ociShape{name: "privileged", privileged: true}, bomb, "memory", false, "", "cgroupfs read-write"},
		{ociShape{name: "default"}, bomb, "", false, "--cap-add=SETUID --cap-add=SETGID --cap-add=CHOWN", "the runtime's default capabilities"},
		{ociShape{name: "default-caps", addCaps: mappingCapNames}, bomb, "", false, "the container's cgroupfs is read-only", "cgroupfs read-only"},
		{ociShape{name: "default-caps-nocgroup", addCaps: mappingCapNames}, noCgroup, "", false, "--security-opt systempaths=unconfined", "mounts over /proc"},
		{ociShape{name: "rootonly-no-setfcap", rootOnly: true, unmask: true, addCaps: mappingCapNames}, noCgroup, "", false, "--cap-add=SETFCAP", "user namespace mapping only one id"},
		{ociShape{name: "rootonly", rootOnly: true, addCaps: withSetfcap}, noCgroup, "", false, "--security-opt systempaths=unconfined", "user namespace mapping only one id"},
		{ociShape{name: "rootonly-unmasked", rootOnly: true, unmask: true, addCaps: withSetfcap}, noCgroup, "ok", true, "", "user namespace mapping only one id"},
		{ociShape{name: "cgroupns-ro", cgroupNS: true, unmask: true, addCaps: mappingCapNames}, bomb, "", false, "the container's cgroupfs is read-only", "cgroupfs read-only"},
		{ociShape{name: "cgroupns-rw", cgroupNS: true, cgroupRW: true, unmask: true, addCaps: append([]string{"CAP_SYS_ADMIN"}, mappingCapNames...)}, bomb, "memory", false, "", "our cgroup shows as /"},
	}
	for _, runc := range runtimes {
		for _, c := range cases {
			testShape(t, runc, bin, parent, c.shape, c.args, c.verdict, c.degraded, c.fix, c.doctor)
		}
	}
}

func testShape(t *testing.T, runc, bin, parent string, shape ociShape, args []string, verdict string, degraded bool, fix, doctor string) {
	c := struct {
		shape       ociShape
		args        []string
		verdict     string
		degraded    bool
		fix, doctor string
	}{shape, args, verdict, degraded, fix, doctor}
	{
		name := filepath.Base(runc) + "/" + c.shape.name
		t.Run(name, func(t *testing.T) {
			cg := filepath.Join(parent, filepath.Base(runc)+"-"+c.shape.name)
			id := fmt.Sprintf("stockade-test-%d-%s-%s", os.Getpid(), filepath.Base(runc), c.shape.name)
			code, out, errs := runContainer(t, runc, ociBundle(t, runc, bin, c.shape, cg, c.args...), id)
			var res struct {
				Verdict  string
				Stdout   string
				Degraded []string
				Error    *string
			}
			if err := json.Unmarshal([]byte(out), &res); err != nil {
				t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errs)
			}
			if c.verdict != "" {
				if res.Verdict != c.verdict || res.Stdout != "1000\n" || (len(res.Degraded) > 0) != c.degraded {
					t.Fatalf("want the jail with verdict %s (degraded %v): exit %d, %s", c.verdict, c.degraded, code, out)
				}
			} else if code != 125 || res.Error == nil || !strings.Contains(*res.Error, c.fix) || strings.Contains(*res.Error, "\n") {
				t.Fatalf("want exit 125 and one line naming %q: exit %d, %s", c.fix, code, out)
			}
			code, out, errs = runContainer(t, runc, ociBundle(t, runc, bin, c.shape, cg, "doctor"), id)
			if !strings.Contains(out, "shape: ") || !strings.Contains(out, c.doctor) {
				t.Fatalf("doctor (exit %d) does not name the shape with %q:\n%s%s", code, c.doctor, out, errs)
			}
		})
	}
}
