// Package pydata is what stockade knows about the Python data stack
// (numpy, pandas, matplotlib) that the jail itself need not: today,
// matplotlib's font cache, kept for each jail's root so that a plot in a
// fresh jail does not rebuild it (which runs fc-list and opens every font
// on the host: about a third of a small plot's time).
//
// FontCache is a jail.Provider: stockade's commands put it in their
// jail.Host, and the jail applies what it provides as plain mount steps.
// The cache is built once per root, Python, matplotlib and set of fonts
// (fontCacheKey), by running matplotlib itself inside a jail, and stored
// by the host user running stockade in a directory only that user can
// write (storeFontCache), built under a lock only that user can open.
// Jails get it bound read-only; matplotlib, which insists on a writable
// config directory, gets a fresh one on the jail's /tmp holding a symlink
// to each cache file.
package pydata
