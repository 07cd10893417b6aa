package pydata

import "github.com/stockade/stockade/jail"

// FontCache is the jail.Provider of matplotlib's font cache: stockade's
// commands put it in their jail.Host's Providers, and every jail whose
// root has matplotlib gets the cache of that root, built once per host
// (in a jail), bound read-only at FontCacheDir, with a writable
// MPLCONFIGDIR (MPLConfigDir, on the jail's /tmp) that links to it. It
// holds nothing: where the cache lives is the host's (jail.Host.CacheDir).
type FontCache struct{}

// Every stockade command's host has a FontCache among its providers.
var _ jail.Provider = FontCache{}
