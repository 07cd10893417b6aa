package jail

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	ok := testSpec("python3")
	cases := []struct {
		name string
		mod  func(*Spec)
		want string // substring of the error; "" for valid
	}{
		{"minimal", func(*Spec) {}, ""},
		{"no command", func(s *Spec) { s.Args = nil }, "no command"},
		{"empty command", func(s *Spec) { s.Args = []string{""} }, "no command"},
		{"env without =", func(s *Spec) { s.Env = []string{"FOO"} }, "want KEY=VALUE"},
		{"env empty key", func(s *Spec) { s.Env = []string{"=x"} }, "want KEY=VALUE"},
		{"negative timeout", func(s *Spec) { s.Timeout = -time.Second }, "more than 0"},
		{"zero timeout", func(s *Spec) { s.Timeout = 0 }, "more than 0"},
		{"zero output", func(s *Spec) { s.OutputLimit = 0 }, "more than 0"},
		{"no workdir mode", func(s *Spec) { s.WorkdirMode = "" }, "workdir mode"},
		{"no rootfs", func(s *Spec) { s.Rootfs = "" }, "rootfs"},
		{"no hostname", func(s *Spec) { s.Hostname = "" }, "host name"},
		{"no seccomp", func(s *Spec) { s.Seccomp = "" }, "seccomp"},
		{"zero pids", func(s *Spec) { s.Cgroup.PidsMax = 0 }, "more than 0"},
		{"NaN cpus", func(s *Spec) { s.Cgroup.CPUs = math.NaN() }, "more than 0"},
		{"two open files", func(s *Spec) { s.Rlimits.OpenFiles = 2 }, "at least 3"},
		{"env twice", func(s *Spec) { s.Env = []string{"A=1", "A=2"} }, "given twice"},
		{"ro below /work", func(s *Spec) { s.ReadOnly = []Bind{{"/data", "/work/x"}} }, "inside /work"},
		{"relative workdir", func(s *Spec) { s.Workdir = "work" }, "absolute"},
		{"bad workdir mode", func(s *Spec) { s.WorkdirMode = "shared" }, "workdir mode"},
		{"relative rootfs", func(s *Spec) { s.Rootfs = "root" }, "absolute"},
		{"hostname with slash", func(s *Spec) { s.Hostname = "a/b" }, "host name"},
		{"ro onto /proc", func(s *Spec) { s.ReadOnly = []Bind{{"/data", "/proc/x"}} }, "inside /proc"},
		{"ro onto /work", func(s *Spec) { s.ReadOnly = []Bind{{"/data", "/work"}} }, "managed by stockade"},
		{"ro relative source", func(s *Spec) { s.ReadOnly = []Bind{{"data", "/data"}} }, "absolute"},
		{"negative memory", func(s *Spec) { s.Cgroup.MemoryMax = -1 }, "more than 0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := ok
			c.mod(&s)
			err := s.Validate()
			if c.want == "" {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

func TestCheckBindDest(t *testing.T) {
	for _, c := range []struct {
		dest string
		ok   bool
	}{
		{"/models", true}, {"/run/stockade/x.py", true}, {"/tmp/data", true}, {"/etc/ssl", true},
		{"/", false}, {"/work", false}, {"/work/x", false}, {"/proc", false}, {"/proc/1", false},
		{"/dev/x", false}, {"/sys/fs", false}, {"/tmp", false}, {"/etc/passwd", false},
		{"/etc/hostname", false}, {"rel", false}, {"/a/../b", false}, {"/a\x00b", false},
	} {
		if err := CheckBindDest(c.dest); (err == nil) != c.ok {
			t.Errorf("CheckBindDest(%q) = %v, want ok %v", c.dest, err, c.ok)
		}
	}
}

// testSpec is a complete spec for tests: the values are the tests' own, not
// defaults (a Spec has none; the CLI's come from the python profile, whose
// thread-pool variables for one CPU are copied here).
func testSpec(args ...string) Spec {
	return Spec{
		Args:        args,
		Env:         []string{"MKL_NUM_THREADS=1", "OMP_NUM_THREADS=1", "OPENBLAS_NUM_THREADS=1"},
		Timeout:     20 * time.Second,
		OutputLimit: 1 << 20,
		Rootfs:      RootfsHost,
		TmpfsSize:   64 << 20,
		WorkdirMode: WorkdirFresh,
		WorkSize:    256 << 20,
		Hostname:    "stockade",
		Rlimits:     Rlimits{OpenFiles: 256, FileSize: 64 << 20},
		Cgroup:      CgroupSpec{MemoryMax: 512 << 20, CPUs: 1, PidsMax: 128},
		Seccomp:     "python",
	}
}
