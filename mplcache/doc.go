// Package mplcache keeps matplotlib's font cache for a jail's root, so that
// a plot in a fresh jail does not rebuild it (which runs fc-list and opens
// every font on the host: about a third of a small plot's time).
//
// The cache is built once per root, Python, matplotlib and set of fonts
// (Key), by running matplotlib itself inside a jail (the caller's job; this
// package has no jail), and stored by the host user running stockade in a
// directory only that user can write (Store). Jails get it bound read-only;
// matplotlib, which insists on a writable config directory, gets a fresh
// one on the jail's /tmp holding a symlink to each cache file.
package mplcache
