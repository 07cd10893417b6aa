// Package procview generates the files through which a jail sees its own
// limits instead of the host's, the way lxcfs does for containers but with
// no daemon: plain content, rendered once by the parent before the jail
// starts, staged by init on the jail's read-only root and bound read-only
// over the kernel's entries (the jail's mask steps, as for the boot id).
//
//   - /proc/meminfo: MemTotal is the run's memory limit, SwapTotal its swap
//     limit, MemFree and MemAvailable the limit less what the jail used when
//     it started. Libraries that size themselves by MemAvailable (numpy's
//     big-memory tests, joblib, data loaders) then stay inside the limit
//     instead of allocating for the host and being OOM-killed.
//   - /sys/devices/system/cpu/online: the CPUs of the jail's affinity mask,
//     as many as --cpus rounded up. glibc's get_nprocs, and so
//     sysconf(_SC_NPROCESSORS_ONLN) and Python's os.cpu_count(), read this
//     file first (then /proc/stat), so multiprocessing.Pool() starts a
//     worker per CPU the jail may use, not per host core.
//
// The package only renders content (File); binding it is the jail's
// business. A new view (uptime, loadavg) is one more File.
package procview
