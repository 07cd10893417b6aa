// Package vmtier runs a jail.Spec whose Isolation is "vm" in a guest
// kernel of its own: QEMU, confined on the host (its own namespaces with
// no network, QEMU's seccomp sandbox, a cgroup covering the guest's memory
// and the VMM's), boots the guest kernel with stockade as its init from an
// initramfs that also holds the host's Python; the host sends the plan
// (the Spec, stdin, files) over a serial port, the guest runs it in the
// ordinary jail and answers with the jail's Result. See docs/isolation.md.
package vmtier
