// Package hostenv tells what kind of place stockade runs in: the host, or
// a container of one of the shapes CI and Kubernetes give (privileged, the
// runtime's default capabilities, a user namespace mapping only its root, a
// private cgroup namespace), from the kernel's own files: the user
// namespace's id maps, the capability sets, the mounts over /proc and the
// cgroup mounts. `stockade doctor` prints it; the jail reads the id maps
// to choose whom the jail user becomes.
package hostenv
