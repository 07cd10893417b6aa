package jail

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"os"

	"github.com/stockade/stockade/jail/internal/jailinit"
	"github.com/stockade/stockade/jail/internal/procview"
	"golang.org/x/sys/unix"
)

// runView is what a run with limits shows the jail of itself (see package
// procview): generated files bound read-only over /proc/meminfo and at
// /sys/devices/system/cpu/online (mask steps, like the boot id's), and the
// CPUs init pins the payload to.
//
// Why the jail cannot see past them: the files are staged on the root
// tmpfs, which is read-only after pivot_root, and bound read-only, nosuid,
// nodev and noexec; the payload has no capability in its user namespace
// (so no umount, no remount, no new procfs, which the user-namespace
// limits also forbid) and the filter refuses the mount family besides. A
// write gets EROFS, an unmount EPERM, and there is no other procfs in the
// jail to read the host's figures from (TestAttackLiftLimitsView).
type runView struct {
	steps []jailinit.Step
	cpus  []int
}

// newRunView renders the view of spec's limits.
func newRunView(spec Spec) (*runView, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("read stockade's CPU affinity: %w", err)
	}
	var allowed []int
	for c := 0; c < len(set)*64; c++ {
		if set.IsSet(c) {
			allowed = append(allowed, c)
		}
	}
	var seed [8]byte
	if _, err := rand.Read(seed[:]); err != nil {
		return nil, err
	}
	cpus := procview.PickCPUs(allowed, procview.CPUCount(spec.Cgroup.CPUs), uint(binary.LittleEndian.Uint64(seed[:])))
	// The host's own meminfo gives the field names only; no figure of it
	// reaches the jail.
	host, _ := os.ReadFile("/proc/meminfo")
	files := []procview.File{
		{Path: procview.MeminfoPath, Data: procview.Meminfo(host, procview.Memory{
			Limit: spec.Cgroup.MemoryMax, Swap: spec.Cgroup.SwapMax})},
		{Path: procview.CPUOnlinePath, Data: procview.CPUList(cpus)},
	}
	v := &runView{cpus: cpus}
	for _, f := range files {
		v.steps = append(v.steps, jailinit.Step{Kind: jailinit.StepMask, Dest: f.Path, Data: string(f.Data)})
	}
	return v, nil
}

// newBootID is a random version 4 UUID in the kernel's boot_id format.
func newBootID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("boot id: %w", err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]), nil
}
