// Package lockfile is the one way stockade serializes its own processes on
// a file: a lock only the user who takes it can open. Anyone who can open
// a file can flock it, so a lock file others could open (a mode that lets
// them, a file of theirs or a symlink planted in its place) would let any
// local user hold it and keep every one of our builds waiting without end.
package lockfile
