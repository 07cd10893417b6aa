// Package rootfs says where a jail's root filesystem comes from, run by
// run: the host-derived default (Host) or a prepared root directory (Dir),
// and whether a prepared directory is fit to be one (Check).
//
// Host and Dir only describe: they return the Entries a jail binds or links
// into its fresh tmpfs root. The jail package does the mounting. The tools
// that make prepared roots (build, import) live apart, in rootfs/image, so
// that a jail does not carry an image library it never uses.
package rootfs
