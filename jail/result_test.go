package jail

import (
	"encoding/json"
	"testing"
	"time"
)

// TestLimitsReportTheirSpecFields: LimitsOf reads every Limits field from
// the Spec field its tag names, durations in milliseconds, and leaves a
// limit null exactly when it is not applied (none asked for, no cgroup, no
// writable /work). Written out as JSON, since that is the form users read.
func TestLimitsReportTheirSpecFields(t *testing.T) {
	base := Spec{
		Timeout: 1500 * time.Millisecond, OutputLimit: 7, TmpfsSize: 11, WorkSize: 13, WorkdirMode: WorkdirFresh,
		Rlimits: Rlimits{OpenFiles: 17, FileSize: 19},
		Cgroup:  CgroupSpec{MemoryMax: 23, SwapMax: 29, CPUs: 0.5, PidsMax: 31, CPUTime: 2 * time.Second},
	}
	for _, c := range []struct {
		name string
		mod  func(*Spec)
		want string
	}{
		{"every limit", func(*Spec) {},
			`{"timeout_ms":1500,"cpu_time_ms":2000,"memory_bytes":23,"swap_bytes":29,"cpus":0.5,"pids":31,"open_files":17,"file_size_bytes":19,"output_bytes":7,"tmpfs_bytes":11,"work_bytes":13}`},
		{"no cgroup", func(s *Spec) { s.Host.NoCgroup = true },
			`{"timeout_ms":1500,"cpu_time_ms":null,"memory_bytes":null,"swap_bytes":null,"cpus":null,"pids":null,"open_files":17,"file_size_bytes":19,"output_bytes":7,"tmpfs_bytes":11,"work_bytes":13}`},
		{"zero is none", func(s *Spec) { s.Cgroup.CPUTime, s.Rlimits.FileSize, s.Cgroup.SwapMax = 0, 0, 0 },
			`{"timeout_ms":1500,"cpu_time_ms":null,"memory_bytes":23,"swap_bytes":0,"cpus":0.5,"pids":31,"open_files":17,"file_size_bytes":null,"output_bytes":7,"tmpfs_bytes":11,"work_bytes":13}`},
		{"no workdir", func(s *Spec) { s.WorkdirMode = WorkdirNone },
			`{"timeout_ms":1500,"cpu_time_ms":2000,"memory_bytes":23,"swap_bytes":29,"cpus":0.5,"pids":31,"open_files":17,"file_size_bytes":19,"output_bytes":7,"tmpfs_bytes":11,"work_bytes":null}`},
		{"a workdir", func(s *Spec) { s.WorkdirMode, s.Workdir = WorkdirNone, "/srv/w" },
			`{"timeout_ms":1500,"cpu_time_ms":2000,"memory_bytes":23,"swap_bytes":29,"cpus":0.5,"pids":31,"open_files":17,"file_size_bytes":19,"output_bytes":7,"tmpfs_bytes":11,"work_bytes":13}`},
	} {
		s := base
		c.mod(&s)
		got, err := json.Marshal(LimitsOf(s))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
	}
}

// A report points into its own Spec: changing the Spec after LimitsOf
// does not change the limits reported (the pointers are the result's own).
func TestLimitsAreACopy(t *testing.T) {
	s := Spec{Cgroup: CgroupSpec{MemoryMax: 5}}
	l := LimitsOf(s)
	s.Cgroup.MemoryMax = 6
	if *l.MemoryBytes != 5 {
		t.Errorf("memory_bytes %d after the Spec changed, want 5", *l.MemoryBytes)
	}
}
