// Package fds keeps a process's descriptors out of the processes it starts
// unless it hands them over on purpose. A descriptor without close-on-exec
// survives execve: one a shell, CI runner, systemd or flock wrapper left
// open in stockade's caller would otherwise reach a jail's init and then
// the jailed code, which could list a host directory or write a root-only
// file through it. The helpers here are the one way the repository marks,
// closes, duplicates and verifies descriptors: stockade's main marks every
// inherited one close-on-exec, a jail's init closes what it inherited and
// marks the rest before the payload's exec, and each reads the table back
// and fails closed if anything unexpected is left.
package fds
