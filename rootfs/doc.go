// Package rootfs says where a jail's root filesystem comes from: the
// host-derived default (Host), a prepared root directory (Dir), and the tools
// that make such directories (Build from debootstrap, Import from a container
// image) and check them (Check).
//
// Host and Dir only describe: they return the Entries a jail binds or links
// into its fresh tmpfs root. The jail package does the mounting.
package rootfs
