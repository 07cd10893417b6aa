package procview

import (
	"reflect"
	"strings"
	"testing"
)

const hostMeminfo = `MemTotal:       16318412 kB
MemFree:         1234567 kB
MemAvailable:   12345678 kB
Buffers:          123456 kB
Cached:          9876543 kB
SwapTotal:       2097148 kB
SwapFree:        2097148 kB
HugePages_Total:       0
Hugepagesize:       2048 kB
DirectMap4k:      314368 kB
`

func TestMeminfoShowsTheLimitAndHidesTheHost(t *testing.T) {
	got := string(Meminfo([]byte(hostMeminfo), Memory{Limit: 512 << 20, Swap: 0, Used: 2 << 20}))
	for _, want := range []string{
		"MemTotal:         524288 kB\n", "MemFree:          522240 kB\n", "MemAvailable:     522240 kB\n",
		"SwapTotal:             0 kB\n", "SwapFree:              0 kB\n", "Buffers:               0 kB\n",
		"HugePages_Total:       0\n", "Hugepagesize:       2048 kB\n", "DirectMap4k:           0 kB\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}
	for _, host := range []string{"16318412", "1234567", "12345678", "9876543", "2097148", "314368"} {
		if strings.Contains(got, host) {
			t.Errorf("host figure %s leaked:\n%s", host, got)
		}
	}
	if n := strings.Count(got, "\n"); n != strings.Count(hostMeminfo, "\n") {
		t.Errorf("%d lines, want the host's %d", n, strings.Count(hostMeminfo, "\n"))
	}
}

func TestMeminfoWithoutHost(t *testing.T) {
	got := string(Meminfo(nil, Memory{Limit: 1 << 30, Swap: 1 << 20, Used: 2 << 30}))
	for _, want := range []string{"MemTotal:        1048576 kB\n", "MemAvailable:          0 kB\n", "SwapTotal:          1024 kB\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}
}

func TestCPUCountRoundsUp(t *testing.T) {
	for in, want := range map[float64]int{0.1: 1, 0.5: 1, 1: 1, 1.01: 2, 2: 2, 2.5: 3, 0: 1} {
		if got := CPUCount(in); got != want {
			t.Errorf("CPUCount(%v) = %d, want %d", in, got, want)
		}
	}
}

func TestPickCPUs(t *testing.T) {
	allowed := []int{0, 1, 2, 3}
	cases := []struct {
		n      int
		offset uint
		want   []int
	}{
		{1, 0, []int{0}}, {1, 5, []int{1}}, {2, 3, []int{0, 3}}, {4, 2, allowed}, {9, 1, allowed},
	}
	for _, c := range cases {
		if got := PickCPUs(allowed, c.n, c.offset); !reflect.DeepEqual(got, c.want) {
			t.Errorf("PickCPUs(%v, %d, %d) = %v, want %v", allowed, c.n, c.offset, got, c.want)
		}
	}
}

func TestCPUList(t *testing.T) {
	for want, in := range map[string][]int{"0\n": {0}, "0-1\n": {1, 0}, "0-2,5,7-8\n": {0, 1, 2, 5, 7, 8}, "3\n": {3}} {
		if got := string(CPUList(in)); got != want {
			t.Errorf("CPUList(%v) = %q, want %q", in, got, want)
		}
	}
}
