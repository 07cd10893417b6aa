// Package beneath is the one way stockade opens, reads, writes, lists,
// walks and removes paths below a directory someone else controls: a
// run's /work (the jail wrote it as it liked), a session's /work (the
// jail's code changes it while the server reads it), the --workdir
// copy-back writes into, the new root init mounts into and the tree an
// image import writes.
//
// Every path is opened relative to a directory descriptor with openat2
// and RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS: never
// above the directory, through no symlink at any component (a planted one
// pointing at /etc/shadow or another run's directory), and never through
// a /proc magic link. A walk opens each directory beneath the one before,
// so a directory swapped for a symlink mid-walk is refused, not followed.
// What was opened is checked with fstat before a byte is read; only
// regular files are read, and a FIFO or device is never opened for
// reading or writing (lstat first, O_NONBLOCK in case it is swapped in).
// A symlink anywhere on the way is ELOOP, whatever the kernel said
// (O_DIRECTORY makes it say ENOTDIR of a trailing one).
package beneath
