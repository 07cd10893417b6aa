package procview

import (
	"bufio"
	"bytes"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// File is one generated file: Path is where the jail sees it, Data what it
// reads there.
type File struct {
	Path string
	Data []byte
}

// Paths of the views, inside the jail.
const (
	MeminfoPath   = "/proc/meminfo"
	CPUOnlinePath = "/sys/devices/system/cpu/online"
)

// Memory is what the jail's /proc/meminfo is made from, in bytes.
type Memory struct {
	Limit int64 // the run's memory limit: MemTotal
	Swap  int64 // swap allowed on top of it: SwapTotal and SwapFree
	Used  int64 // charged to the jail so far
}

// Meminfo renders /proc/meminfo for m. host is the host's /proc/meminfo: its
// field names, order and units are kept, so parsers that expect a field
// (psutil wants Buffers, Cached, Active, Inactive, Shmem, SReclaimable) find
// it, in the kernel's layout (the name and colon in 16 columns, the value
// in 8); every value is replaced, by the jail's own where the jail has one and
// by 0 elsewhere, so no host figure leaks through. Hugepagesize, a property
// of the CPU, is kept. Without host (nil), the fields the kernel has had
// since 3.14 are written.
func Meminfo(host []byte, m Memory) []byte {
	free := max(m.Limit-m.Used, 0)
	own := map[string]int64{
		"MemTotal": m.Limit, "MemFree": free, "MemAvailable": free,
		"SwapTotal": m.Swap, "SwapFree": m.Swap,
	}
	names := defaultFields
	keep := map[string]string{}
	if len(host) > 0 {
		names = nil
		sc := bufio.NewScanner(bytes.NewReader(host))
		for sc.Scan() {
			name, rest, ok := strings.Cut(sc.Text(), ":")
			if !ok || name == "" {
				continue
			}
			names = append(names, name)
			if name == "Hugepagesize" {
				keep[name] = strings.TrimSpace(rest)
			}
		}
		for _, n := range []string{"MemTotal", "MemFree", "MemAvailable", "SwapTotal", "SwapFree"} {
			if !contains(names, n) {
				names = append(names, n)
			}
		}
	}
	var b bytes.Buffer
	for _, n := range names {
		if v, ok := keep[n]; ok {
			fmt.Fprintf(&b, "%-16s%8s kB\n", n+":", strings.TrimSuffix(v, " kB"))
			continue
		}
		v := own[n] / 1024
		if strings.HasPrefix(n, "HugePages_") {
			// Counts, not sizes: the kernel writes them without a unit.
			fmt.Fprintf(&b, "%-16s%8d\n", n+":", 0)
			continue
		}
		fmt.Fprintf(&b, "%-16s%8d kB\n", n+":", v)
	}
	return b.Bytes()
}

var defaultFields = []string{"MemTotal", "MemFree", "MemAvailable", "Buffers", "Cached",
	"SwapCached", "Active", "Inactive", "SwapTotal", "SwapFree", "Dirty", "Writeback",
	"AnonPages", "Mapped", "Shmem", "Slab", "SReclaimable", "SUnreclaim"}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// CPUCount is how many CPUs a CPU limit of cpus cores amounts to: rounded
// up, at least one.
func CPUCount(cpus float64) int {
	n := int(cpus)
	if float64(n) < cpus {
		n++
	}
	return max(n, 1)
}

// PickCPUs chooses n CPUs of allowed (the CPUs stockade itself may run
// on) for a jail's affinity mask, starting at offset and wrapping, so that
// concurrent jails with different offsets spread over the host's cores
// instead of all landing on the first. With n at least len(allowed), all of
// them. The result is sorted.
func PickCPUs(allowed []int, n int, offset uint) []int {
	if n >= len(allowed) || n <= 0 {
		return append([]int(nil), allowed...)
	}
	out := make([]int, 0, n)
	start := int(offset % uint(len(allowed)))
	for i := 0; i < n; i++ {
		out = append(out, allowed[(start+i)%len(allowed)])
	}
	sort.Ints(out)
	return out
}

// CPUList renders CPU numbers in the kernel's list format ("0-3,5\n"), as
// /sys/devices/system/cpu/online holds them.
func CPUList(cpus []int) []byte {
	s := append([]int(nil), cpus...)
	sort.Ints(s)
	var parts []string
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] == s[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.Itoa(s[i]))
		} else {
			parts = append(parts, strconv.Itoa(s[i])+"-"+strconv.Itoa(s[j]))
		}
		i = j + 1
	}
	return []byte(strings.Join(parts, ",") + "\n")
}
