// Package vmtier runs a jail.Spec whose Isolation is "vm" in a guest
// kernel of its own: QEMU, confined on the host (its own namespaces with
// no network, QEMU's seccomp sandbox, a cgroup covering the guest's memory
// and the VMM's), boots the guest kernel with stockade as its init from an
// initramfs that also holds the host's Python; the host sends the plan
// (the Spec, stdin, files) over a serial port, the guest runs it in the
// ordinary jail and answers with the jail's Result. With an allowlist, a
// third serial port carries the guest proxy's connections as yamux streams
// to a second proxy on the host, with the same rules, which decides again
// and dials (net_linux.go). See docs/isolation.md.
package vmtier
