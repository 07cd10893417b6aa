package profiles

import (
	"math"
	"slices"
	"strconv"

	"github.com/stockade/stockade/jail"
)

// Hostname is the jail's host name; no profile field changes it.
const Hostname = "stockade"

// threadVars are the thread-pool sizes of OpenBLAS, OpenMP and MKL. Each
// starts one thread per host core unless told otherwise, which under a pids
// limit and a CPU quota kills `import numpy` or thrashes; Spec sets them to
// the CPUs the run has unless the profile names them itself.
var threadVars = []string{"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"}

// Spec turns a validated profile into the jail's complete plain data: every
// field of the Spec is set here, from the profile, and nowhere else. Adding
// a limit means one schema field, its line here, the jail.Spec field and the
// code in jail that enforces it.
func (p *Profile) Spec(args []string) jail.Spec {
	l, fs := p.Limits, p.Filesystem
	s := jail.Spec{
		Args:        slices.Clone(args),
		Env:         p.env(),
		Timeout:     l.Timeout,
		OutputLimit: l.Output,
		Rootfs:      fs.Rootfs,
		TmpfsSize:   fs.TmpfsSize,
		WorkSize:    fs.WorkSize,
		WorkdirMode: jail.WorkdirFresh,
		ExecWorkdir: !fs.Noexec,
		Hostname:    Hostname,
		Rlimits:     jail.Rlimits{OpenFiles: uint64(l.OpenFiles), FileSize: uint64(l.FileSize)},
		Cgroup: jail.CgroupSpec{MemoryMax: l.Memory, SwapMax: l.Swap, CPUs: l.CPUs,
			PidsMax: l.Pids, CPUTime: l.CPUTime},
		Seccomp: p.Seccomp.Policy,
		Network: jail.NetworkSpec{
			Allow:        slices.Clone(p.Network.Allow),
			AllowPrivate: slices.Clone(p.Network.AllowPrivate),
			MaxTunnels:   int(p.Network.MaxTunnels),
			MaxUpload:    p.Network.MaxUpload,
			MaxDownload:  p.Network.MaxDownload,
		},
	}
	switch fs.Workdir {
	case WorkdirFresh:
	case WorkdirNone:
		s.WorkdirMode = jail.WorkdirNone
	default:
		s.Workdir = fs.Workdir
	}
	for _, b := range fs.RO {
		s.ReadOnly = append(s.ReadOnly, jail.Bind{Source: b.Source, Dest: b.Dest})
	}
	return s
}

// env is the profile's variables, sorted, plus the thread-pool sizes.
func (p *Profile) env() []string {
	vars := make(map[string]string, len(p.Environment.Vars)+len(threadVars))
	threads := strconv.Itoa(int(math.Ceil(p.Limits.CPUs)))
	for _, k := range threadVars {
		vars[k] = threads
	}
	for k, v := range p.Environment.Vars {
		vars[k] = v
	}
	keys := make([]string, 0, len(vars))
	for k := range vars {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	env := make([]string, len(keys))
	for i, k := range keys {
		env[i] = k + "=" + vars[k]
	}
	return env
}
