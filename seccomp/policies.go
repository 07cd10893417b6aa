package seccomp

// The built-in policies. Each knows every x86_64 system call libseccomp names
// up to futex_requeue (456, Linux 6.7); TestPolicyKnowsEverySyscall keeps it
// that way, so a newer libseccomp naming a call the policy never reviewed
// fails the tests instead of silently changing what the jail answers.

func builtin() map[string]func() *Policy {
	return map[string]func() *Policy{
		"python": pythonPolicy,
		"strict": strictPolicy,
	}
}

// pythonPolicy is what CPython 3.11, its standard library, numpy and the
// Go init's vfork+exec need, and nothing that changes the jail itself.
func pythonPolicy() *Policy {
	return &Policy{
		Name:    "python",
		Summary: "CPython and its usual libraries: threads, processes, files, AF_UNIX/AF_INET/AF_INET6 sockets; no namespaces, mounts, tracing, kernel modules, BPF, io_uring or keyrings",
		Allow: []string{
			// Files and directories. Writes are confined by the mounts, not here.
			"read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev",
			"preadv2", "pwritev2", "close", "close_range", // open, openat, creat: noSetID
			"lseek", "dup", "dup2", "dup3", "fcntl", "flock", "fsync", "fdatasync",
			"sync_file_range", "truncate", "ftruncate", "fallocate", "fadvise64", "readahead",
			"stat", "fstat", "lstat", "newfstatat", "statx", "statfs", "fstatfs",
			"access", "faccessat", "faccessat2", "readlink", "readlinkat", "getdents", "getdents64",
			"getcwd", "chdir", "fchdir", "rename", "renameat", "renameat2", "mkdir", "mkdirat",
			"rmdir", "link", "linkat", "unlink", "unlinkat", "symlink", "symlinkat",
			"chown", "fchown", "lchown", "fchownat", // chmod and friends: noSetID
			"umask", "utime", "utimes", "utimensat", "futimesat",
			"getxattr", "lgetxattr", "fgetxattr", "listxattr", "llistxattr", "flistxattr",
			"setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr", "fremovexattr",
			"sendfile", "copy_file_range", "splice", "tee", "vmsplice", // shutil's fast copies
			"inotify_init", "inotify_init1", "inotify_add_watch", "inotify_rm_watch",

			// Memory. Limits come from the memory cgroup and RLIMIT_MEMLOCK.
			"brk", "mmap", "munmap", "mprotect", "mremap", "madvise", "msync", "mincore",
			"mlock", "mlock2", "munlock", "mlockall", "munlockall", "membarrier",
			"pkey_alloc", "pkey_free", "pkey_mprotect", "map_shadow_stack",
			"memfd_create", // libffi closures, os.memfd_create
			// NUMA placement of the caller's own memory: OpenBLAS binds its
			// 128 MiB buffers with mbind(MPOL_PREFERRED), jemalloc, libnuma and
			// OpenMP runtimes read and set the thread's policy. Each acts only
			// on the calling thread or its own address range; a preference
			// cannot take memory from outside the jail's memory cgroup.
			"mbind", "set_mempolicy", "get_mempolicy", "set_mempolicy_home_node",

			// Processes and threads. clone is in AllowIf; how many processes the
			// jail may hold is the pids cgroup's business, not the filter's.
			"fork", "vfork", "execve", "execveat", "exit", "exit_group", "wait4", "waitid",
			"kill", "tkill", "tgkill", "pidfd_open", "pidfd_send_signal",
			"set_tid_address", "set_robust_list", "rseq", "arch_prctl", "restart_syscall",
			"futex", "futex_waitv", "futex_wake", "futex_wait", "futex_requeue",
			"getpid", "getppid", "gettid", "getpgid", "setpgid", "getpgrp", "getsid", "setsid",
			// Identity calls change nothing without capabilities, which the jail
			// has dropped; refusing them would only turn EPERM into a report.
			"getuid", "geteuid", "getgid", "getegid", "getresuid", "getresgid", "getgroups",
			"setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid",
			"setfsuid", "setfsgid", "setgroups", "capget", "capset",
			"getrlimit", "setrlimit", // the jail's hard limits need CAP_SYS_RESOURCE to raise
			"getrusage", "times", "sysinfo", "uname", "getcpu", "getrandom",

			// Scheduling: raising priority or a real-time class needs CAP_SYS_NICE
			// or RLIMIT_RTPRIO, which the jail does not grant.
			"sched_yield", "sched_getaffinity", "sched_setaffinity", "sched_getparam",
			"sched_setparam", "sched_getscheduler", "sched_setscheduler", "sched_getattr",
			"sched_setattr", "sched_get_priority_max", "sched_get_priority_min",
			"sched_rr_get_interval", "getpriority", "setpriority", "ioprio_get", "ioprio_set",

			// Signals and time.
			"rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigpending", "rt_sigtimedwait",
			"rt_sigqueueinfo", "rt_tgsigqueueinfo", "rt_sigsuspend", "sigaltstack", "pause",
			"signalfd", "signalfd4", "alarm", "getitimer", "setitimer",
			"timer_create", "timer_settime", "timer_gettime", "timer_getoverrun", "timer_delete",
			"timerfd_create", "timerfd_settime", "timerfd_gettime",
			"clock_gettime", "clock_getres", "clock_nanosleep", "nanosleep", "gettimeofday", "time",

			// Waiting on descriptors.
			"poll", "ppoll", "select", "pselect6", "epoll_create", "epoll_create1", "epoll_ctl",
			"epoll_wait", "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2", "pipe", "pipe2",

			// Sockets; socket and socketpair are in AllowIf, connect and the
			// sends with a destination in Observe. The network namespace
			// holds only loopback, so these reach nothing outside the jail.
			"bind", "listen", "accept", "accept4", "getsockname", "getpeername",
			"recvfrom", "recvmsg", "recvmmsg", "shutdown", "setsockopt", "getsockopt",

			// SysV and POSIX IPC: private to the jail's IPC namespace.
			"shmget", "shmat", "shmdt", "shmctl", "semget", "semop", "semtimedop", "semctl",
			"msgget", "msgsnd", "msgrcv", "msgctl",
			"mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr",
		},
		AllowIf: append([]Rule{
			{Syscall: "socket", Args: []ArgRule{{Index: 0, Name: "domain",
				Only: Values(afUnix, afInet, afInet6)}}},
			// socketpair exists for AF_UNIX (and AF_TIPC, which we do not want).
			{Syscall: "socketpair", Args: []ArgRule{{Index: 0, Name: "domain",
				Only: Values(afUnix)}}},
			// Threads, fork and vfork, but no new namespace (see cloneNamespaceFlags).
			{Syscall: "clone", Args: []ArgRule{{Index: 0, Name: "flags",
				Never: AnyBitOf(cloneNamespaceFlags)}}},
			{Syscall: "ioctl", Args: []ArgRule{{Index: 1, Name: "request",
				Never: Values(tiocsti, tioclinux, tiocsetd, seccompIoctlNotifSend, seccompIoctlNotifAddfd)}}},
			{Syscall: "prctl", Args: []ArgRule{{Index: 0, Name: "option",
				Only: Values(pythonPrctl...)}}},
			// ADDR_NO_RANDOMIZE turns off ASLR for the caller's next exec, which
			// only weakens exploit mitigation inside the jail (setarch -R,
			// reproducible runs); it crosses no boundary. Every other persona
			// flag is refused: READ_IMPLIES_EXEC makes every mapping executable,
			// MMAP_PAGE_ZERO maps page zero (null-dereference exploits), UNAME26
			// leaked kernel stack (CVE-2012-0957).
			{Syscall: "personality", Args: []ArgRule{{Index: 0, Name: "persona",
				Only: Values(perLinux, personalityQuery, addrNoRandomize)}}},
			// Only the caller's own limits (pid 0, which glibc's setrlimit
			// passes). Another jailed process's limits, the init's included,
			// are not the caller's to change. Raising a hard limit needs
			// CAP_SYS_RESOURCE, so "lowering only" for hard limits is already
			// the kernel's rule; the pointer to the new limit cannot be filtered.
			{Syscall: "prlimit64", Args: []ArgRule{{Index: 0, Name: "pid",
				Only: Values(0)}}},
			// move_pages on the caller itself (pid 0, as libnuma's
			// numa_move_pages passes it) only queries or moves its own pages;
			// with another pid it would read and move that process's memory.
			{Syscall: "move_pages", Args: []ArgRule{{Index: 0, Name: "pid",
				Only: Values(0)}}},
		}, noSetID()...),
		Observe: observedNetwork(),
		Refuse:  neverAllowed(),
		Absent: []Group{
			{Why: "clone3 keeps its flags in memory, which a seccomp filter cannot read, so CLONE_NEWUSER could not be refused; ENOSYS makes glibc's pthread_create and posix_spawn fall back to clone, whose flags the filter checks",
				Calls: []string{"clone3"}},
			{Why: "self-sandboxing APIs: callers treat ENOSYS as \"not supported here\" and carry on, where EPERM is an error",
				Calls: []string{"landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self"}},
			{Why: "openat2 keeps its mode in a struct the filter cannot read (see noSetID); glibc and CPython never call it, and callers fall back to openat on ENOSYS",
				Calls: []string{"openat2"}},
		},
	}
}

// observedNetwork are the calls that name a destination. The jail's network
// namespace stops every one that leaves it; the supervisor sees them so that
// a run that tried the network directly is told so (and which address),
// and answers one for an address outside the jail itself, without waiting
// for the kernel's "network unreachable".
func observedNetwork() []Observed {
	const why = "a destination outside the jail is reported (the namespace has no route out)"
	return []Observed{
		{Syscall: "connect", Why: why},
		{Syscall: "sendto", Why: why + "; sendto without one (send(2)) is not observed", IfSet: 5},
		{Syscall: "sendmmsg", Why: why},
		// Every sendmsg, since its destination is in memory the filter
		// cannot read: a round trip to the supervisor each (multiprocessing
		// passes descriptors with it, TCP and UDP sends use sendto). Init
		// hands the supervisor its listener with sendmsg from a thread
		// the filter is not on, so that no notification waits for a
		// supervisor that has no listener yet.
		{Syscall: "sendmsg", Why: why},
	}
}

// pythonPrctl are the prctl options that change only the caller's own
// bookkeeping. Everything else is refused, PR_SET_SECCOMP (a second filter;
// see seccomp in neverAllowed), PR_SET_MM, PR_SET_PTRACER, PR_SET_SECUREBITS,
// PR_CAPBSET_DROP and PR_SET_SYSCALL_USER_DISPATCH among them.
var pythonPrctl = []uint32{
	prSetPdeathsig, prGetPdeathsig, prGetDumpable, prSetDumpable, prGetKeepcaps,
	prSetName, prGetName, prGetSeccomp, prCapbsetRead, prGetTimerslack, prSetTimerslack,
	prSetChildSubreaper, prGetChildSubreaper, prSetNoNewPrivs, prGetNoNewPrivs,
	prSetTHPDisable, prGetTHPDisable, prCapAmbient, prGetSpeculationCtrl, prSetVMA,
}

// neverAllowed is shared by every policy: the calls that change the jail
// itself, reach into other processes, or open large kernel attack surface.
func neverAllowed() []Group {
	return []Group{
		{Why: "mounts and the new mount API: would rearrange or escape the jail's filesystem",
			Calls: []string{"mount", "umount2", "fsopen", "fsconfig", "fsmount", "fspick",
				"move_mount", "open_tree", "mount_setattr", "pivot_root", "chroot"}},
		{Why: "namespaces: unshare(CLONE_NEWUSER) needs no privilege and returns every capability over the new namespaces",
			Calls: []string{"unshare", "setns"}},
		{Why: "another process's memory or descriptors: tracing, cross-memory copies, stealing fds",
			Calls: []string{"ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd",
				"kcmp", "process_madvise", "process_mrelease", "get_robust_list"}},
		{Why: "a second seccomp filter with its own listener would receive the jail's refused calls before ours (the newest filter wins a tie) and could answer CONTINUE",
			Calls: []string{"seccomp"}},
		{Why: "large kernel attack surface that Python does not need",
			Calls: []string{"bpf", "perf_event_open", "io_uring_setup", "io_uring_enter",
				"io_uring_register", "userfaultfd", "keyctl", "add_key", "request_key",
				"fanotify_init", "fanotify_mark", "name_to_handle_at", "open_by_handle_at",
				"modify_ldt", "set_thread_area", "get_thread_area", "memfd_secret",
				"io_setup", "io_destroy", "io_getevents", "io_submit", "io_cancel", "io_pgetevents"}},
		{Why: "the host's kernel, clock and devices: modules, kexec, reboot, swap, time, accounting, quotas, I/O ports, the kernel log, the terminal",
			Calls: []string{"init_module", "finit_module", "delete_module", "kexec_load",
				"kexec_file_load", "reboot", "swapon", "swapoff", "settimeofday", "clock_settime",
				"adjtimex", "clock_adjtime", "acct", "quotactl", "quotactl_fd", "iopl", "ioperm",
				"syslog", "vhangup", "sethostname", "setdomainname"}},
		{Why: "flush whole filesystems, a cheap way to stall the host: sync every one, syncfs the one behind an fd, which for /work (a host directory) is the host's disk; fsync and fdatasync cover the jail's own files",
			Calls: []string{"sync", "syncfs"}},
		{Why: "moves another process's memory between NUMA nodes (its own pages are move_pages with pid 0, allowed where the policy says so)",
			Calls: []string{"migrate_pages"}},
		{Why: "page-cache residency of files the jail did not write is a side channel (cachestat, like mincore before its fix)",
			Calls: []string{"cachestat"}},
		{Why: "obsolete or never implemented on x86_64",
			Calls: []string{"uselib", "ustat", "sysfs", "_sysctl", "create_module", "get_kernel_syms",
				"query_module", "nfsservctl", "getpmsg", "putpmsg", "afs_syscall", "tuxcall",
				"security", "vserver", "lookup_dcookie", "epoll_ctl_old", "epoll_wait_old",
				"remap_file_pages"}},
	}
}

// strictPolicy is python without the network, the IPC namespaces' objects,
// pipe splicing, anonymous executable files and all but a few ioctls and
// prctls: for code that only computes and writes files. Threads and
// processes stay, since CPython's own modules and numpy's BLAS start threads,
// and counting processes is the pids cgroup's job.
func strictPolicy() *Policy {
	p := pythonPolicy()
	p.Name = "strict"
	p.Summary = "python minus AF_INET/AF_INET6 sockets, SysV/POSIX IPC, splice/tee/vmsplice, memfd_create/execveat, mincore, and all but a few ioctl requests, prctl options and personas"
	removed := []Group{
		{Why: "strict: IPC objects are not needed by code that only computes",
			Calls: []string{"shmget", "shmat", "shmdt", "shmctl", "semget", "semop", "semtimedop",
				"semctl", "msgget", "msgsnd", "msgrcv", "msgctl", "mq_open", "mq_unlink",
				"mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr"}},
		{Why: "strict: pipe splicing has a history of page-cache bugs (CVE-2022-0847); shutil falls back to read/write",
			Calls: []string{"splice", "tee", "vmsplice"}},
		{Why: "strict: an anonymous file executed by fd sidesteps the noexec mounts",
			Calls: []string{"memfd_create", "execveat"}},
		{Why: "strict: page-cache residency is a side channel",
			Calls: []string{"mincore"}},
	}
	gone := map[string]bool{}
	for _, g := range removed {
		for _, c := range g.Calls {
			gone[c] = true
		}
	}
	var allow []string
	for _, c := range p.Allow {
		if !gone[c] {
			allow = append(allow, c)
		}
	}
	p.Allow = allow
	p.Refuse = append(p.Refuse, removed...)
	p.AllowIf = []Rule{
		{Syscall: "socket", Args: []ArgRule{{Index: 0, Name: "domain", Only: Values(afUnix)}}},
		{Syscall: "socketpair", Args: []ArgRule{{Index: 0, Name: "domain", Only: Values(afUnix)}}},
		{Syscall: "clone", Args: []ArgRule{{Index: 0, Name: "flags", Never: AnyBitOf(cloneNamespaceFlags)}}},
		// What CPython itself issues: isatty, terminal size, socket blocking
		// mode, close-on-exec, bytes pending.
		{Syscall: "ioctl", Args: []ArgRule{{Index: 1, Name: "request",
			Only: Values(tcgets, tiocgwinsz, tiocgpgrp, fionread, fionbio, fioclex, fionclex)}}},
		{Syscall: "prctl", Args: []ArgRule{{Index: 0, Name: "option",
			Only: Values(prSetPdeathsig, prGetPdeathsig, prGetDumpable, prSetName, prGetName,
				prGetSeccomp, prCapbsetRead, prSetNoNewPrivs, prGetNoNewPrivs)}}},
		{Syscall: "personality", Args: []ArgRule{{Index: 0, Name: "persona",
			Only: Values(perLinux, personalityQuery)}}},
		{Syscall: "prlimit64", Args: []ArgRule{{Index: 0, Name: "pid", Only: Values(0)}}},
		{Syscall: "move_pages", Args: []ArgRule{{Index: 0, Name: "pid", Only: Values(0)}}},
	}
	p.AllowIf = append(p.AllowIf, noSetID()...)
	return p
}

// setIDBits are S_ISUID and S_ISGID.
const setIDBits = 0o6000

// noSetID allows creating files and changing modes without the set-id
// bits. The mounts are nosuid inside the jail, but /work (and a --workdir)
// is a host directory: a setuid copy the jail leaves there would run as the
// jail's host uid (the --workdir owner's) for any local user who finds it.
func noSetID() []Rule {
	mode := func(syscall string, index int) Rule {
		return Rule{Syscall: syscall, Args: []ArgRule{{Index: index, Name: "mode", Never: AnyBitOf(setIDBits)}}}
	}
	return []Rule{
		mode("open", 2), mode("openat", 3), mode("creat", 1),
		mode("chmod", 1), mode("fchmod", 1), mode("fchmodat", 2), mode("fchmodat2", 2),
		// FIFOs; device nodes need CAP_MKNOD and the mounts are nodev.
		mode("mknod", 1), mode("mknodat", 2),
	}
}
