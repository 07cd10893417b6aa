package jail

import (
	"strings"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	ok := Spec{Args: []string{"python3"}}
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
		{"negative timeout", func(s *Spec) { s.Timeout = -time.Second }, "must be positive"},
		{"relative workdir", func(s *Spec) { s.Workdir = "work" }, "absolute"},
		{"bad workdir mode", func(s *Spec) { s.WorkdirMode = "shared" }, "workdir mode"},
		{"relative rootfs", func(s *Spec) { s.Rootfs = "root" }, "absolute"},
		{"hostname with slash", func(s *Spec) { s.Hostname = "a/b" }, "host name"},
		{"ro onto /proc", func(s *Spec) { s.ReadOnly = []Bind{{"/data", "/proc/x"}} }, "below /proc/"},
		{"ro onto /work", func(s *Spec) { s.ReadOnly = []Bind{{"/data", "/work"}} }, "managed by stockade"},
		{"ro relative source", func(s *Spec) { s.ReadOnly = []Bind{{"data", "/data"}} }, "absolute"},
		{"negative memory", func(s *Spec) { s.Cgroup.MemoryMax = -1 }, "negative"},
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

func TestParseBind(t *testing.T) {
	cases := []struct {
		in   string
		want Bind
		err  bool
	}{
		{"/data", Bind{"/data", "/data"}, false},
		{"/data/:/in", Bind{"/data", "/in"}, false},
		{"/a:/dev/x", Bind{}, true},
		{":/x", Bind{}, true},
		{"rel:/x", Bind{}, true},
	}
	for _, c := range cases {
		got, err := ParseBind(c.in)
		if (err != nil) != c.err || (!c.err && got != c.want) {
			t.Errorf("ParseBind(%q) = %+v, %v; want %+v, error %v", c.in, got, err, c.want, c.err)
		}
	}
}

func TestWithDefaultsAreTheSafeOnes(t *testing.T) {
	s := Spec{Args: []string{"x"}}.WithDefaults()
	if s.Timeout != 10*time.Second || s.OutputLimit != 1<<20 || s.TmpfsSize != 64<<20 ||
		s.WorkdirMode != WorkdirFresh || s.Seccomp != "python" || s.Hostname != "stockade" ||
		s.Rlimits.OpenFiles == 0 || s.Rlimits.FileSize == 0 {
		t.Fatalf("defaults: %+v", s)
	}
}
