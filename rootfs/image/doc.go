// Package image makes the prepared root directories that `stockade run
// --rootfs DIR` uses: Build from debootstrap, Import from a container image
// (OCI layout or docker-save tarball); `stockade rootfs check` (rootfs.Check)
// vets the result.
//
// It is tooling, used by `stockade rootfs` and tests; a run only looks its
// root up and checks it (package rootfs), so the jail never links the image
// library.
package image
