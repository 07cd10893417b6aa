package profiles

import (
	"math"
	"strings"
	"testing"
)

// TestValidate covers every message Validate gives, on Defaults with one
// field broken, and checks that the error names where the bad value came from.
func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		field  Field
		mutate func(p *Profile)
		want   string
	}{
		{"zero timeout", FieldTimeout, func(p *Profile) { p.Limits.Timeout = 0 }, "limits.timeout: must be more than 0"},
		{"negative cpu time", FieldCPUTime, func(p *Profile) { p.Limits.CPUTime = -1 }, "limits.cpu_time: must not be negative"},
		{"memory without a unit", FieldMemory, func(p *Profile) { p.Limits.Memory = 512 }, "limits.memory: 512 is below the minimum of 4M (a missing unit?)"},
		{"negative swap", FieldSwap, func(p *Profile) { p.Limits.Swap = -1 }, "limits.swap: must not be negative"},
		{"zero cpus", FieldCPUs, func(p *Profile) { p.Limits.CPUs = 0 }, "limits.cpus: 0 is not in [0.01, 1024]"},
		{"too many cpus", FieldCPUs, func(p *Profile) { p.Limits.CPUs = 2000 }, "limits.cpus: 2000 is not in [0.01, 1024]"},
		{"nan cpus", FieldCPUs, func(p *Profile) { p.Limits.CPUs = math.NaN() }, "limits.cpus: NaN is not in [0.01, 1024]"},
		// Below the kernel's smallest quota the cgroup refuses the limit:
		// it was a set-up error naming no field.
		{"cpus below the kernel's quota", FieldCPUs, func(p *Profile) { p.Limits.CPUs = 0.0001 }, "limits.cpus: 0.0001 is not in [0.01, 1024]"},
		{"zero pids", FieldPids, func(p *Profile) { p.Limits.Pids = 0 }, "limits.pids: 0 is not in [16, 4194304]"},
		{"too many pids", FieldPids, func(p *Profile) { p.Limits.Pids = 1 << 23 }, "limits.pids: 8388608 is not in [16, 4194304]"},
		{"too few open files", FieldOpenFiles, func(p *Profile) { p.Limits.OpenFiles = 2 }, "limits.open_files: 2 is not in [16, 1048576]"},
		{"negative file size", FieldFileSize, func(p *Profile) { p.Limits.FileSize = -1 }, "limits.file_size: must not be negative"},
		{"zero output", FieldOutput, func(p *Profile) { p.Limits.Output = 0 }, "limits.output: must be more than 0"},
		{"relative rootfs", FieldRootfs, func(p *Profile) { p.Filesystem.Rootfs = "rootfs" }, `filesystem.rootfs: "rootfs" must be "host" or an absolute, clean path`},
		{"unclean rootfs", FieldRootfs, func(p *Profile) { p.Filesystem.Rootfs = "/srv/../etc" }, `filesystem.rootfs: "/srv/../etc" must be "host" or an absolute, clean path`},
		{"zero tmpfs", FieldTmpfsSize, func(p *Profile) { p.Filesystem.TmpfsSize = 0 }, "filesystem.tmpfs_size: must be more than 0"},
		{"zero work size", FieldWorkSize, func(p *Profile) { p.Filesystem.WorkSize = 0 }, "filesystem.work_size: must be more than 0"},
		{"bad workdir", FieldWorkdir, func(p *Profile) { p.Filesystem.Workdir = "new" }, `filesystem.workdir: "new" must be "fresh", "none" or an absolute, clean path other than /`},
		{"root workdir", FieldWorkdir, func(p *Profile) { p.Filesystem.Workdir = "/" }, `filesystem.workdir: "/" must be "fresh", "none" or an absolute, clean path other than /`},
		{"relative bind source", FieldRO, func(p *Profile) { p.Filesystem.RO = []Bind{{"data", "/data"}} }, `filesystem.ro[0]: source "data" must be an absolute, clean path`},
		{"relative bind destination", FieldRO, func(p *Profile) { p.Filesystem.RO = []Bind{{"/data", "data"}} }, `filesystem.ro[0]: destination "data" must be an absolute, clean path`},
		{"dotdot bind destination", FieldRO, func(p *Profile) { p.Filesystem.RO = []Bind{{"/data", "/x/../etc"}} }, `filesystem.ro[0]: destination "/x/../etc" must be an absolute, clean path`},
		{"bind over root", FieldRO, func(p *Profile) { p.Filesystem.RO = []Bind{{"/data", "/"}} }, `filesystem.ro[0]: destination "/" is managed by stockade`},
		{"bind into proc", FieldRO, func(p *Profile) { p.Filesystem.RO = []Bind{{"/data", "/proc/self"}} }, `filesystem.ro[0]: destination "/proc/self" is inside /proc, which stockade mounts itself`},
		{"bind onto dev", FieldRO, func(p *Profile) { p.Filesystem.RO = []Bind{{"/data", "/dev"}} }, `filesystem.ro[0]: destination "/dev" is managed by stockade`},
		{"bind twice", FieldRO, func(p *Profile) { p.Filesystem.RO = []Bind{{"/a", "/m"}, {"/b", "/m"}} }, `filesystem.ro[1]: destination "/m" is bound twice`},
		{"bad var name", FieldEnvVars, func(p *Profile) { p.Environment.Vars = map[string]string{"1A": "x"} }, `environment.vars.1A: "1A" is not a variable name ([A-Za-z_][A-Za-z0-9_]*)`},
		{"var name with =", FieldEnvVars, func(p *Profile) { p.Environment.Vars = map[string]string{"A=B": "x"} }, `environment.vars.A=B: "A=B" is not a variable name ([A-Za-z_][A-Za-z0-9_]*)`},
		{"var value with NUL", FieldEnvVars, func(p *Profile) { p.Environment.Vars = map[string]string{"A": "x\x00y"} }, `environment.vars.A: value contains a NUL byte`},
		{"bad seccomp policy", FieldSeccompPolicy, func(p *Profile) { p.Seccomp.Policy = "lax" }, `seccomp.policy: "lax" must be one of "python", "strict", "off"`},
		{"bad network mode", FieldNetworkMode, func(p *Profile) { p.Network.Mode = "bridge" }, `network.mode: "bridge" must be "none" (the only mode for now)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Defaults()
			tt.mutate(p)
			p.Mark(tt.field, Origin{"mine.toml", 7})
			err := p.Validate()
			if err == nil {
				t.Fatal("Validate passed")
			}
			if want := "mine.toml:7: " + tt.want; err.Error() != want {
				t.Errorf("error:\n%s\nwant:\n%s", err, want)
			}
		})
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	p := &Profile{}
	err := p.Validate()
	if err == nil {
		t.Fatal("an empty profile validated")
	}
	// Unset fields are zero and still judged, without an origin.
	for _, want := range []string{"limits.timeout: must be more than 0", "limits.memory:", "filesystem.rootfs:", "seccomp.policy:", "network.mode:"} {
		if !strings.Contains(err.Error(), "\n"+want) && !strings.HasPrefix(err.Error(), want) {
			t.Errorf("missing %q in:\n%s", want, err)
		}
	}
}

func TestValidateAccepts(t *testing.T) {
	p := Defaults()
	p.Filesystem.Rootfs = "/srv/rootfs"
	p.Filesystem.Workdir = "/srv/agent-work"
	p.Filesystem.RO = []Bind{{"/data/models", "/models"}, {"/srv/wheels", "/srv/wheels"}}
	p.Environment.Vars = map[string]string{"_A1": "", "PATH": "/usr/bin"}
	p.Limits.CPUTime, p.Limits.FileSize, p.Limits.Swap = 0, 0, 0
	p.Limits.CPUs = 0.01
	p.Seccomp.Policy = SeccompOff
	if err := p.Validate(); err != nil {
		t.Error(err)
	}
}

// MinCPUs itself is a quota the kernel takes (1 ms per 100 ms): the bound
// refuses nothing the cgroup would accept.
func TestMinCPUsPasses(t *testing.T) {
	p := Defaults()
	p.Limits.CPUs = MinCPUs
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
}
