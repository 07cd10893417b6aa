// Package profiles reads, merges and validates stockade profiles: TOML files
// that hold the whole policy of a run (limits, filesystem, environment,
// seccomp and network), so that a systemd unit or an agent harness can say
// --profile nightly-agent instead of repeating a dozen flags.
//
// # Schema
//
// Every field is optional in a file; a field a file leaves unset comes from the
// profile it extends, and a profile without extends starts from [Defaults],
// the built-in python profile, where every default is written once.
// Sizes are a byte count (integer) or a string for [ParseSize]; durations are
// whole seconds (integer or float) or a string for [ParseDuration].
//
//	extends     = "python"  # a built-in, a profile name in the search path, or a file
//	description = "..."     # one line, shown by `stockade profile list`
//
//	[limits]
//	timeout    = "10s"  # wall clock, > 0
//	cpu_time   = "0s"   # CPU time; 0 = no limit
//	memory     = "512M" # memory.max, at least 4M
//	swap       = "0"    # memory.swap.max; 0 = no swap
//	cpus       = 1.0    # CPUs' worth of time (cpu.max), 0.01 <= cpus <= 1024
//	pids       = 128    # pids.max, 16 .. 4194304 (the jail's init is counted)
//	open_files = 256    # RLIMIT_NOFILE, 16 .. 1048576
//	file_size  = "64M"  # RLIMIT_FSIZE; 0 = no limit
//	output     = "1M"   # bytes kept per stream (stdout, stderr), > 0
//
//	[filesystem]
//	rootfs     = "host" # "host" or an absolute directory
//	tmpfs_size = "64M"  # size of /tmp, > 0
//	work_size  = "256M" # most a fresh /work holds (a tmpfs, counted in memory), > 0
//	workdir    = "fresh" # "fresh" (empty writable /work), "none" (no writable /work) or an absolute host dir
//	noexec     = true   # mount /work noexec (/tmp and /dev/shm always are)
//	ro         = ["/data/models:/models", "/srv/wheels"] # read-only binds SRC[:DST], both absolute;
//	                    # DST not one jail.CheckBindDest refuses (/, /tmp, /work, /proc, ...)
//
//	[environment]
//	vars = { HF_HUB_OFFLINE = "1" } # added to the jail's fixed environment; OMP_NUM_THREADS,
//	                    # OPENBLAS_NUM_THREADS and MKL_NUM_THREADS default to cpus rounded up
//
//	[seccomp]
//	policy = "python"   # "python", "strict" or "off"
//
//	[network]
//	mode = "none"       # loopback only; the only mode for now
//
// # Merging
//
// [Merge] works field by field: a field set in the overriding profile wins.
// Two fields are collections and merge per element: environment.vars per
// variable, and filesystem.ro per destination (an overriding bind to the same
// destination replaces the base's, others are appended). The CLI's flags are
// one more overriding profile built with [Profile.Set]; the merged profile is
// validated once and [Profile.Spec] turns it into a complete jail.Spec, the
// only place a jail.Spec is built.
//
// A server request's limits are a layer too, built with [Profile.SetValue]
// (a JSON value decoded as a file's TOML value is) and laid over the
// server's profile by [Tighten], which works as Merge does but refuses a
// value looser than the profile's (the server's ceiling) and any field that
// is not a limit; the result is validated as a flag's would be. Each schema
// row names its bounds, the jail.Spec field its value becomes, the result
// entry that reports it, how it tightens and its flag ([Flags]), so a limit
// is declared once, in its row; what the row points at (its field here, its
// default in the built-in python profile, its Spec and result fields and
// the code that enforces it) is docs/design.md's "A new limit".
//
// # Errors
//
// Every error names where the value came from, the field and the problem, in
// the form "mine.toml:7: limits.memory: \"12 parsecs\" is not a size"; unknown
// fields are errors. Parse and Load return all the errors of a file joined with
// errors.Join, each an [*Error], in document order.
package profiles
