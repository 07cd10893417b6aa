# Attack: learn about the host from the jail's /proc: its boot id (which
# names the host and its boot across runs), kernel command line, load
# average (what its other tenants do) and uptime (when it last rebooted).
# The host compares each with its own.
for p in ["/proc/sys/kernel/random/boot_id", "/proc/cmdline", "/proc/loadavg", "/proc/uptime"]:
    try:
        print(p, open(p).read().strip())
    except OSError as e:
        print(p, "unreadable", e.errno)
