package vmtier

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/stockade/stockade/jail"
)

// Doctor is what `stockade doctor` says about the VM tier on this host,
// one line a fact: KVM, QEMU, the guest kernel, the guest image.
func Doctor(host jail.Host) []string {
	var out []string
	p := func(format string, a ...any) { out = append(out, "vm tier: "+fmt.Sprintf(format, a...)) }
	if err := KVM(); err != nil {
		p("kvm: no (%v): isolation vm refuses to run unless emulation is allowed (--vm-emulate, vm_emulate = true, %s=1; slow, for testing)", err, EmulateEnv)
	} else {
		p("kvm: yes (/dev/kvm)")
	}
	if q, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		p("qemu: missing (apt-get install qemu-system-x86)")
	} else {
		v, _ := exec.Command(q, "--version").Output()
		first, _, _ := strings.Cut(string(v), "\n")
		p("qemu: %s (%s)", q, strings.TrimSpace(first))
		// What the VMM's jail binds into QEMU's root, found as a run finds it.
		if files, err := qemuFiles(q); err != nil {
			p("vmm jail: no (%v): isolation vm refuses to run", err)
		} else {
			p("vmm jail: a root of %d files of QEMU's (binary, libraries, firmware) plus the guest's kernel and image; an unprivileged uid of the run's", len(files))
		}
	}
	cache := cacheDir(jail.Spec{Host: host}, Options{})
	k := KernelPath(cache, "")
	if _, err := os.Stat(k); err != nil {
		p("kernel: missing (%v): set %s to a vmlinuz (vmtest/run --fetch-kernel fetches Debian's)", err, KernelEnv)
	} else {
		p("kernel: %s", k)
	}
	if _, err := exec.LookPath("mksquashfs"); err != nil {
		p("mksquashfs: missing (apt-get install squashfs-tools): the guest's root image cannot be built")
	}
	roots, _ := filepath.Glob(filepath.Join(cache, rootPrefix+"*"+rootSuffix))
	if len(roots) == 0 {
		p("image: not built yet (the first vm run builds it into %s)", cache)
	}
	for _, r := range roots {
		if fi, err := os.Stat(r); err == nil {
			p("image: %s (%d MiB)", r, fi.Size()>>20)
		}
	}
	return out
}
