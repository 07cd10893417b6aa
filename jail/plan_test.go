package jail

import (
	"strings"
	"testing"

	"github.com/stockade/stockade/jail/internal/jailinit"
	"github.com/stockade/stockade/rootfs"
)

func hostRoot() []rootfs.Entry {
	return []rootfs.Entry{
		{Path: "/usr", Source: "/usr", Dir: true},
		{Path: "/bin", Link: "usr/bin"},
		{Path: "/etc/ld.so.cache", Source: "/etc/ld.so.cache"},
	}
}

func find(p []jailinit.Step, dest string) (jailinit.Step, bool) {
	for _, s := range p {
		if s.Dest == dest {
			return s, true
		}
	}
	return jailinit.Step{}, false
}

func TestPlanLayout(t *testing.T) {
	spec := testSpec("python3")
	spec.ReadOnly = []Bind{{Source: "/srv/models", Dest: "/models"}}
	p, err := buildPlan(planInput{spec: spec, root: hostRoot(), workdir: "/tmp/run/work"})
	if err != nil {
		t.Fatal(err)
	}
	if p[0].Kind != jailinit.StepTmpfs || p[0].Dest != "/" {
		t.Fatalf("plan must start with the root tmpfs, got %+v", p[0])
	}
	usr, _ := find(p, "/usr")
	if usr.Kind != jailinit.StepBind || usr.Writable || !usr.Exec || usr.User {
		t.Errorf("/usr: %+v, want a read-only exec bind of a trusted source", usr)
	}
	work, _ := find(p, "/work")
	upper, _ := find(p, workUpper)
	if work.Kind != jailinit.StepOverlay || work.Exec || work.Source != "/tmp/run/work" || work.Upper != workUpper ||
		upper.Kind != jailinit.StepTmpfs || upper.Size != spec.WorkSize || !upper.Report {
		t.Errorf("/work: %+v over %+v, want a noexec overlay on a reported tmpfs of --work-size", work, upper)
	}
	tmp, _ := find(p, "/tmp")
	if tmp.Kind != jailinit.StepTmpfs || tmp.Size != 64<<20 || tmp.Mode != 0o1777 {
		t.Errorf("/tmp: %+v", tmp)
	}
	models, _ := find(p, "/models")
	if models.Kind != jailinit.StepBind || models.Writable || models.Exec || !models.User {
		t.Errorf("--ro bind: %+v, want read-only, noexec, resolved as a user path", models)
	}
	passwd, _ := find(p, "/etc/passwd")
	if !strings.Contains(passwd.Data, "sandbox:x:1000:1000:") {
		t.Errorf("passwd lacks the jail user: %q", passwd.Data)
	}
	for _, d := range devices {
		s, ok := find(p, "/dev/"+d)
		if !ok || !s.Device || s.Source != "/dev/"+d {
			t.Errorf("/dev/%s: %+v", d, s)
		}
	}
	for _, s := range p {
		for _, bad := range []string{"/etc/shadow", "/root", "/home", "/run", "/var"} {
			if s.Dest == bad || s.Source == bad {
				t.Errorf("plan exposes %s: %+v", bad, s)
			}
		}
	}
}

func TestPlanNoWorkdir(t *testing.T) {
	spec := testSpec("x")
	spec.WorkdirMode = WorkdirNone
	p, err := buildPlan(planInput{spec: spec, root: hostRoot()})
	if err != nil {
		t.Fatal(err)
	}
	if w, _ := find(p, "/work"); w.Kind != jailinit.StepDir {
		t.Fatalf("/work: %+v, want a plain (read-only) directory", w)
	}
}

func TestPlanRefusesBindBelowSymlink(t *testing.T) {
	spec := testSpec("x")
	spec.ReadOnly = []Bind{{Source: "/srv", Dest: "/bin/evil"}}
	if _, err := buildPlan(planInput{spec: spec, root: hostRoot()}); err == nil || !strings.Contains(err.Error(), "below the symlink") {
		t.Fatalf("bind below /bin -> usr/bin: %v", err)
	}
}

func TestPlanRefusesDuplicates(t *testing.T) {
	spec := testSpec("x")
	spec.ReadOnly = []Bind{{Source: "/srv", Dest: "/usr"}}
	if _, err := buildPlan(planInput{spec: spec, root: hostRoot()}); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("second bind on /usr: %v", err)
	}
}

func TestPlanCustomRootOverlaysEtc(t *testing.T) {
	root := []rootfs.Entry{{Path: "/usr", Source: "/r/usr", Dir: true}, {Path: "/etc", Source: "/r/etc", Dir: true}}
	spec := testSpec("x")
	spec.Rootfs = "/r"
	p, err := buildPlan(planInput{spec: spec, root: root, custom: true, workdir: "/w"})
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := find(p, "/etc/passwd"); !s.Optional {
		t.Fatalf("generated passwd over a prepared /etc must be optional: %+v", s)
	}
}

func TestPlanFreshWorkIsBoundedTmpfs(t *testing.T) {
	spec := testSpec("x")
	spec.WorkSize = 32 << 20
	p, err := buildPlan(planInput{spec: spec, root: hostRoot()})
	if err != nil {
		t.Fatal(err)
	}
	w, _ := find(p, "/work")
	if w.Kind != jailinit.StepTmpfs || w.Size != 32<<20 || w.Inodes != 8192 || !w.Report || w.Exec {
		t.Fatalf("/work: %+v, want a noexec 32 MiB tmpfs with 8192 inodes reported to the parent", w)
	}
}
