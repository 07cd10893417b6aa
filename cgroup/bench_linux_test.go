package cgroup

import (
	"fmt"
	"os"
	"testing"
)

// defaultLimits are stockade run's defaults (issue 3): 512M, no swap, 1 cpu, 128 pids.
var defaultLimits = Limits{MemoryMax: 512 << 20, CPUs: 1, PidsMax: 128}

// BenchmarkCreateDelete is the cgroup cost of one run without the process:
// create with the default limits, read stats, remove.
func BenchmarkCreateDelete(b *testing.B) {
	m := isolatedManager(b, "")
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		g, err := m.Create(fmt.Sprintf("bench-%d-%d", os.Getpid(), i), defaultLimits)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := g.Stats(); err != nil {
			b.Fatal(err)
		}
		if err := g.Delete(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCreateAddProcDelete adds placing a real (short) process and
// waiting for it, so it includes what the kernel does on migration.
func BenchmarkRunTrueInGroup(b *testing.B) {
	m := isolatedManager(b, "")
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		g, err := m.Create(fmt.Sprintf("benchrun-%d-%d", os.Getpid(), i), defaultLimits)
		if err != nil {
			b.Fatal(err)
		}
		p := startInGroup(b, g, false, false, "/bin/true")
		p.release(b)
		if err := <-p.done; err != nil {
			b.Fatal(err)
		}
		p.done <- nil
		if _, err := g.Stats(); err != nil {
			b.Fatal(err)
		}
		if err := g.Delete(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCPUUsage is one poll of the CPU-time limit.
func BenchmarkCPUUsage(b *testing.B) {
	m := isolatedManager(b, "")
	g := createGroup(b, m, defaultLimits)
	for b.Loop() {
		if _, err := g.CPUUsage(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNewManager is the once-per-stockade start-up: detect and probe.
func BenchmarkNewManager(b *testing.B) {
	isolatedManager(b, "")
	for b.Loop() {
		if _, err := NewManager(Options{subdir: testSubdir(b)}); err != nil {
			b.Fatal(err)
		}
	}
}
