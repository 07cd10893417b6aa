package cgroup

import (
	"math"
	"reflect"
	"strings"
	"testing"
)

// hybridMountinfo is this development host's layout: every v1 controller on
// its own mount, cpu and cpuacct separate, cgroup2 at unified without controllers.
const hybridMountinfo = `24 30 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`

const hybridProcCgroup = `9:name=systemd:/
8:pids:/
6:freezer:/
4:memory:/process_api/499ae93dfeceb0bc6465813e3be077f5
2:cpuacct:/
1:cpu:/
0::/
`

// unifiedMountinfo is a systemd host on cgroup v2 (optional fields present).
const unifiedMountinfo = `25 30 0:23 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
30 25 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 master:1 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
`

// legacyMountinfo is an old host with cpu and cpuacct co-mounted and no cgroup2.
const legacyMountinfo = `32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:14 - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:17 - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids ro,nosuid,nodev,noexec,relatime shared:21 - cgroup cgroup rw,pids
`

func TestParseProcCgroup(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		v1      map[string]string
		unified string
		wantErr bool
	}{
		{"hybrid host", hybridProcCgroup, map[string]string{
			"name=systemd": "/", "pids": "/", "freezer": "/",
			"memory": "/process_api/499ae93dfeceb0bc6465813e3be077f5", "cpuacct": "/", "cpu": "/",
		}, "/", false},
		{"co-mounted controllers", "3:cpu,cpuacct:/user.slice\n", map[string]string{"cpu": "/user.slice", "cpuacct": "/user.slice"}, "", false},
		{"v2 only", "0::/user.slice/user-1000.slice/session-2.scope\n", map[string]string{}, "/user.slice/user-1000.slice/session-2.scope", false},
		{"path with colon", "0::/a:b\n", map[string]string{}, "/a:b", false},
		{"malformed", "garbage\n", nil, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseProcCgroup(strings.NewReader(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			if !reflect.DeepEqual(got.v1, tt.v1) || got.unified != tt.unified {
				t.Errorf("got v1=%v unified=%q, want v1=%v unified=%q", got.v1, got.unified, tt.v1, tt.unified)
			}
		})
	}
}

func TestParseMountinfo(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []mountEntry
		wantErr bool
	}{
		{"v1 and v2, non-cgroup skipped", hybridMountinfo[:strings.Index(hybridMountinfo, "33 31")] + "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n", []mountEntry{
			{root: "/", mountPoint: "/sys/fs/cgroup/cpu", fsType: "cgroup", superOpts: []string{"rw", "cpu"}},
			{root: "/", mountPoint: "/sys/fs/cgroup/unified", fsType: "cgroup2", superOpts: []string{"rw"}},
		}, false},
		{"optional fields", unifiedMountinfo, []mountEntry{
			{root: "/", mountPoint: "/sys/fs/cgroup", fsType: "cgroup2", superOpts: []string{"rw", "nsdelegate", "memory_recursiveprot"}},
		}, false},
		{"read-only mount", "39 31 0:36 / /sys/fs/cgroup/pids ro,nosuid - cgroup cgroup rw,pids\n", []mountEntry{
			{root: "/", mountPoint: "/sys/fs/cgroup/pids", readOnly: true, fsType: "cgroup", superOpts: []string{"rw", "pids"}},
		}, false},
		{"container bind of its own cgroup, escaped space", `50 49 0:32 /docker/abc /sys/fs/cgroup/my\040mem rw - cgroup cgroup rw,memory` + "\n", []mountEntry{
			{root: "/docker/abc", mountPoint: "/sys/fs/cgroup/my mem", fsType: "cgroup", superOpts: []string{"rw", "memory"}},
		}, false},
		{"no separator", "31 23 0:28 / /sys/fs/cgroup rw\n", nil, true},
		{"too few fields", "31 23 / - cgroup2 cgroup2 rw\n", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseMountinfo(strings.NewReader(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestDetect(t *testing.T) {
	tests := []struct {
		name, mountinfo, procCgroup string
		mode                        Mode
		variant                     string
		v1                          []string // controllers expected on v1 mounts
		wantErr                     string
	}{
		{"hybrid host uses v1", hybridMountinfo, hybridProcCgroup, V1, "hybrid", []string{"memory", "cpu", "cpuacct", "pids", "freezer"}, ""},
		{"unified host", unifiedMountinfo, "0::/user.slice\n", V2, "unified", nil, ""},
		{"legacy co-mounted", legacyMountinfo, "3:cpu,cpuacct:/\n4:memory:/\n5:pids:/\n", V1, "legacy", []string{"memory", "cpu", "cpuacct", "pids"}, ""},
		{"only name=systemd on v1", "40 31 0:37 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,name=systemd\n" + unifiedMountinfo, "1:name=systemd:/\n0::/\n", V2, "hybrid", nil, ""},
		{"nothing mounted", "24 30 0:22 / /sys rw - sysfs sysfs rw\n", "0::/\n", "", "", nil, "no cgroup"},
		{"v2 without 0:: line", unifiedMountinfo, "1:name=systemd:/\n", "", "", nil, "no 0:: line"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := detect(strings.NewReader(tt.mountinfo), strings.NewReader(tt.procCgroup))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if l.mode != tt.mode || l.variant != tt.variant {
				t.Errorf("mode %s/%s, want %s/%s", l.mode, l.variant, tt.mode, tt.variant)
			}
			for _, c := range tt.v1 {
				if _, ok := l.v1[c]; !ok {
					t.Errorf("no v1 mount found for %s", c)
				}
			}
			if tt.mode == V1 && l.v1["cpu"].mountPoint == l.v1["memory"].mountPoint {
				t.Errorf("cpu and memory share mount %s", l.v1["cpu"].mountPoint)
			}
		})
	}
}

func TestHostDirAndParentDir(t *testing.T) {
	whole := mountEntry{root: "/", mountPoint: "/sys/fs/cgroup/memory"}
	bound := mountEntry{root: "/docker/abc", mountPoint: "/sys/fs/cgroup/memory"}
	tests := []struct {
		name    string
		m       mountEntry
		path    string
		want    string
		wantErr bool
	}{
		{"whole tree", whole, "/process_api/x", "/sys/fs/cgroup/memory/process_api/x", false},
		{"root cgroup", whole, "/", "/sys/fs/cgroup/memory", false},
		{"bound subtree, own cgroup is its root", bound, "/docker/abc", "/sys/fs/cgroup/memory", false},
		{"bound subtree, below it", bound, "/docker/abc/sub", "/sys/fs/cgroup/memory/sub", false},
		{"own cgroup outside the bind", bound, "/other", "", true},
		{"sibling with the same prefix", bound, "/docker/abcdef", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := hostDir(tt.m, tt.path)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("hostDir = %q, %v; want %q, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
	if got, err := parentDir(whole, "system.slice/stockade.service"); err != nil || got != "/sys/fs/cgroup/memory/system.slice/stockade.service" {
		t.Errorf("parentDir = %q, %v", got, err)
	}
	if got, err := parentDir(whole, "/a/../../etc"); err == nil {
		t.Errorf("parentDir accepted a path with ..: %q", got)
	}
}

func TestKeyedValue(t *testing.T) {
	cpuStat := "usage_usec 1234567\nuser_usec 1000000\nsystem_usec 234567\nnr_periods 10\nnr_throttled 3\nthrottled_usec 5000\n"
	memEvents := "low 0\nhigh 0\nmax 17\noom 2\noom_kill 1\noom_group_kill 0\n"
	oomControl := "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"
	tests := []struct {
		name, data, key string
		want            uint64
		ok              bool
	}{
		{"cpu.stat usage", cpuStat, "usage_usec", 1234567, true},
		{"cpu.stat system", cpuStat, "system_usec", 234567, true},
		{"memory.events max", memEvents, "max", 17, true},
		{"memory.events oom is not oom_kill", memEvents, "oom", 2, true},
		{"memory.events oom_kill", memEvents, "oom_kill", 1, true},
		{"v1 oom_control", oomControl, "oom_kill", 3, true},
		{"v1 oom_control before 4.13", "oom_kill_disable 0\nunder_oom 0\n", "oom_kill", 0, false},
		{"pids.events", "max 42", "max", 42, true},
		{"cgroup.events", "populated 0\nfrozen 0\n", "populated", 0, true},
		{"cpuacct.stat", "user 10997\nsystem 4181\n", "system", 4181, true},
		{"missing key", cpuStat, "nr_bursts", 0, false},
		{"prefix of a key", cpuStat, "usage", 0, false},
		{"garbage value", "max lots\n", "max", 0, false},
		{"empty", "", "max", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := keyedValue([]byte(tt.data), tt.key)
			if got != tt.want || ok != tt.ok {
				t.Errorf("keyedValue(%q) = %d, %v; want %d, %v", tt.key, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestParseValue(t *testing.T) {
	tests := []struct {
		in      string
		want    uint64
		wantErr bool
	}{
		{"268435456\n", 268435456, false},
		{"max\n", math.MaxUint64, false},
		{"9223372036854771712\n", 9223372036854771712, false},
		{"-1\n", 0, true},
		{"", 0, true},
	}
	for _, tt := range tests {
		got, err := parseValue([]byte(tt.in))
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("parseValue(%q) = %d, %v; want %d, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestLimitsValidate(t *testing.T) {
	tests := []struct {
		name    string
		l       Limits
		wantErr string
	}{
		{"defaults", Limits{MemoryMax: 512 << 20, CPUs: 1, PidsMax: 128}, ""},
		{"no limits", Limits{}, ""},
		{"smallest cpu quota", Limits{CPUs: 0.01}, ""},
		{"cpu below kernel minimum", Limits{CPUs: 0.005}, "minimum quota"},
		{"negative memory", Limits{MemoryMax: -1}, "memory"},
		{"negative swap", Limits{SwapMax: -1}, "swap"},
		{"negative pids", Limits{PidsMax: -5}, "pids"},
		{"negative cpus", Limits{CPUs: -1}, "cpu"},
		{"absurd cpus", Limits{CPUs: 1e12}, "more than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.l.validate()
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("validate() = %v, want error containing %q", err, tt.wantErr)
			}
		})
	}
	if q := (Limits{CPUs: 0.5}).cfsQuota(); q != 50*1e6 {
		t.Errorf("cfsQuota for 0.5 cpus = %v, want 50ms", q)
	}
}
