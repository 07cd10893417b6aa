package server

import (
	"fmt"
	"math/rand"
	"reflect"
	"strings"
	"testing"

	"github.com/stockade/stockade/api"
	"github.com/stockade/stockade/jail"
	"github.com/stockade/stockade/profiles"
)

// edgeServer is a Server that is never served: New builds its policies
// and specs, which is all requestSpec reads.
func edgeServer(t *testing.T, toml string) (*Server, string) {
	t.Helper()
	p := profiles.Defaults()
	if toml != "" {
		over, err := profiles.Parse("capped.toml", []byte(toml))
		if err != nil {
			t.Fatal(err)
		}
		p = profiles.Merge(p, over)
		p.Name = "capped"
	}
	s, err := New(Config{Profiles: []Profile{{Name: p.Name, Policy: p}}})
	if err != nil {
		t.Fatal(err)
	}
	return s, p.Name
}

// looser says how got is looser than the ceiling, or "": every limit no
// higher, a "no limit" (0) only where the ceiling has none, and every
// other field of the spec the ceiling's own.
func looser(ceiling, got jail.Spec) string {
	var why []string
	c, g := ceiling, got
	if g.Timeout > c.Timeout || g.Timeout <= 0 {
		why = append(why, fmt.Sprintf("timeout %v over %v", g.Timeout, c.Timeout))
	}
	if c.Cgroup.CPUTime > 0 && (g.Cgroup.CPUTime <= 0 || g.Cgroup.CPUTime > c.Cgroup.CPUTime) {
		why = append(why, fmt.Sprintf("cpu time %v over %v", g.Cgroup.CPUTime, c.Cgroup.CPUTime))
	}
	if g.Cgroup.MemoryMax > c.Cgroup.MemoryMax || g.Cgroup.SwapMax > c.Cgroup.SwapMax ||
		g.Cgroup.CPUs > c.Cgroup.CPUs || !(g.Cgroup.CPUs >= profiles.MinCPUs) || g.Cgroup.PidsMax > c.Cgroup.PidsMax {
		why = append(why, fmt.Sprintf("cgroup %+v over %+v", g.Cgroup, c.Cgroup))
	}
	if g.Rlimits.OpenFiles > c.Rlimits.OpenFiles {
		why = append(why, fmt.Sprintf("open files %d over %d", g.Rlimits.OpenFiles, c.Rlimits.OpenFiles))
	}
	if c.Rlimits.FileSize > 0 && (g.Rlimits.FileSize == 0 || g.Rlimits.FileSize > c.Rlimits.FileSize) {
		why = append(why, fmt.Sprintf("file size %d over %d", g.Rlimits.FileSize, c.Rlimits.FileSize))
	}
	if g.OutputLimit > c.OutputLimit || g.OutputLimit <= 0 {
		why = append(why, fmt.Sprintf("output %d over %d", g.OutputLimit, c.OutputLimit))
	}
	// The rest must be the ceiling's; the thread variables follow cpus.
	g.Timeout, g.Cgroup, g.Rlimits, g.OutputLimit = c.Timeout, c.Cgroup, c.Rlimits, c.OutputLimit
	g.Env, c.Env = withoutThreads(g.Env), withoutThreads(c.Env)
	if !reflect.DeepEqual(c, g) {
		why = append(why, fmt.Sprintf("other fields changed: %+v", g))
	}
	return strings.Join(why, "; ")
}

func withoutThreads(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasSuffix(strings.SplitN(kv, "=", 2)[0], "_NUM_THREADS") {
			out = append(out, kv)
		}
	}
	return out
}

// TestAttackRequestLimitEdges sends every edge of every limit a request
// can spell (zero where zero is no limit, negative and huge numbers,
// overflowing sizes and durations, units and spellings that parse
// differently, duplicate keys, both names of output, null, nested values,
// strings for numbers) through the request's own decoder and requestSpec,
// and requires each to be refused or to make a spec no looser than the
// profile's, in every field.
func TestAttackRequestLimitEdges(t *testing.T) {
	bodies := []string{
		`{"timeout": 0}`, `{"timeout": "0"}`, `{"timeout": "-1s"}`, `{"timeout": -1}`, `{"timeout": "-0s"}`,
		`{"timeout": 1e-12}`, `{"timeout": 9223372036}`, `{"timeout": 9223372037}`, `{"timeout": 1e300}`,
		`{"timeout": "9223372036854775807ns"}`, `{"timeout": "2562047h47m16.854775807s"}`, `{"timeout": "2562048h"}`,
		`{"timeout": "1e3"}`, `{"timeout": "10"}`, `{"timeout": "10.0000001"}`, `{"timeout": " 5s "}`, `{"timeout": "5S"}`,
		`{"timeout": "inf"}`, `{"timeout": "NaN"}`, `{"timeout": 5, "timeout": 50}`, `{"timeout": 50, "timeout": 5}`,
		`{"cpu_time": 0}`, `{"cpu_time": "0s"}`, `{"cpu_time": "0"}`, `{"cpu_time": -0}`, `{"cpu_time": -0.0}`, `{"cpu_time": 1e-10}`,
		`{"cpu_time": "1ns"}`, `{"cpu_time": "5s"}`, `{"cpu_time": "5.000000001s"}`, `{"cpu_time": "-0s"}`,
		`{"memory": "0"}`, `{"memory": 0}`, `{"memory": -1}`, `{"memory": "-1"}`, `{"memory": "16E"}`, `{"memory": "8E"}`,
		`{"memory": "7.99999999999999999E"}`, `{"memory": "9223372036854775807"}`, `{"memory": 9223372036854775807}`,
		`{"memory": 9223372036854775808}`, `{"memory": 18446744073709551615}`, `{"memory": 18446744073709551616}`,
		`{"memory": "512MiB"}`, `{"memory": "512mb"}`, `{"memory": "0.5G"}`, `{"memory": "512.0000000000000000001M"}`,
		`{"memory": "512M "}`, `{"memory": " 512M"}`, `{"memory": "5 12M"}`, `{"memory": "0x20000000"}`, `{"memory": "1e9"}`,
		`{"memory": 1e9}`, `{"memory": 536870912.0}`, `{"memory": 536870913}`, `{"memory": "536870913B"}`,
		`{"memory": "+1G"}`, `{"memory": "1_000M"}`, `{"memory": "１G"}`, `{"memory": "1G\u0000"}`, `{"memory": null}`,
		`{"memory": {"max": "1G"}}`, `{"memory": ["1G"]}`, `{"memory": true}`, `{"memory": "64M", "memory": "1G"}`,
		`{"swap": "1"}`, `{"swap": 1}`, `{"swap": -1}`, `{"swap": "-0"}`, `{"swap": 0}`,
		`{"cpus": 0}`, `{"cpus": -0.0}`, `{"cpus": 0.001}`, `{"cpus": 0.00999999}`, `{"cpus": 0.01}`, `{"cpus": 1.0000001}`,
		`{"cpus": 1e308}`, `{"cpus": 1e309}`, `{"cpus": -1e309}`, `{"cpus": "1"}`, `{"cpus": "0.5"}`, `{"cpus": 2}`, `{"cpus": 5e-324}`,
		`{"pids": 0}`, `{"pids": -1}`, `{"pids": 129}`, `{"pids": 9223372036854775807}`, `{"pids": 9223372036854775808}`,
		`{"pids": -9223372036854775808}`, `{"pids": 16.0}`, `{"pids": 1.6e1}`, `{"pids": "16"}`, `{"pids": 4294967424}`,
		`{"open_files": 0}`, `{"open_files": 2}`, `{"open_files": 18446744073709551615}`, `{"open_files": -1}`, `{"open_files": 257}`,
		`{"file_size": 0}`, `{"file_size": "0"}`, `{"file_size": "0B"}`, `{"file_size": "0.0000001K"}`, `{"file_size": "-0"}`,
		`{"file_size": -1}`, `{"file_size": "65M"}`, `{"file_size": "9223372036854775807"}`, `{"file_size": 1}`,
		`{"output": 0}`, `{"output": "0"}`, `{"output": "2M"}`, `{"output_limit": "2M"}`, `{"output_limit": 0}`,
		`{"output": "2M", "output_limit": "1K"}`, `{"output": "1K", "output_limit": "2M"}`,
		`{"work_size": "1G"}`, `{"tmpfs_size": "1G"}`, `{"network.allow": ["x"]}`, `{"allow": ["x"]}`, `{"limits.memory": "1G"}`,
		`{"Memory": "1G"}`, `{"MEMORY": "1G"}`, `{"memory ": "1G"}`, `{"": 1}`, `{"env": {"A": "1"}}`, `{"vars": {"A": "1"}}`,
		`{"rootfs": "/"}`, `{"seccomp": "off"}`, `{"policy": "off"}`, `{"mode": "host"}`, `{"extends": "shell"}`, `{"description": "x"}`,
	}
	for _, prof := range []string{"", "[limits]\ncpu_time = \"5s\"\nswap = \"0\"\n", "[limits]\ncpu_time = \"0s\"\nfile_size = \"0\"\nswap = \"64M\"\n"} {
		s, name := edgeServer(t, prof)
		ceiling := s.specs[name]
		check := func(body string) {
			req, err := decodeRequest([]byte(`{"code": "1", "limits": ` + body + `}`))
			if err != nil {
				return // refused as JSON
			}
			spec, err := s.requestSpec(name, req.Limits)
			if err != nil {
				return // refused by the policy
			}
			if why := looser(ceiling, spec); why != "" {
				t.Errorf("profile %q, limits %s: accepted looser: %s", name, body, why)
			}
		}
		for _, b := range bodies {
			check(b)
		}
		// And random mixes of the edges.
		rng := rand.New(rand.NewSource(1))
		for range 2000 {
			var parts []string
			for range 1 + rng.Intn(4) {
				b := bodies[rng.Intn(len(bodies))]
				parts = append(parts, b[1:len(b)-1])
			}
			check("{" + strings.Join(parts, ", ") + "}")
		}
	}
}

// TestAttackRequestGivesOneLimitTwice: "output" and its older name
// "output_limit" set the same limit. Given both, the one that sorted last
// silently won: {"output": "1K", "output_limit": "512K"} ran with 512K
// while the request (and whoever reads it in a log) said 1K. Like a key
// given twice in a profile file, it must be refused.
func TestAttackRequestGivesOneLimitTwice(t *testing.T) {
	s, name := edgeServer(t, "")
	req, err := decodeRequest([]byte(`{"code": "1", "limits": {"output": "1K", "output_limit": "512K"}}`))
	if err != nil {
		t.Fatal(err)
	}
	spec, err := s.requestSpec(name, req.Limits)
	if ae, ok := err.(*api.Error); !ok || ae.Status != 400 || !strings.Contains(ae.Msg, "limits.output_limit") {
		t.Errorf("output and output_limit both given: spec with output %d, error %v; want a 400 naming limits.output_limit", spec.OutputLimit, err)
	}
}
