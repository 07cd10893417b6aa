package seccomp

// Linux's values for the constants the policies rule on and the Example
// decoder names. They are spelled out here rather than taken from
// golang.org/x/sys/unix because the tables must mean the same thing when the
// package is vetted on another GOOS, where unix's AF_* values differ.

type named struct {
	name  string
	value uint64
}

// Address families (socket, socketpair: argument 0).
const (
	afUnix    = 1
	afInet    = 2
	afInet6   = 10
	afNetlink = 16
	afPacket  = 17
)

var socketFamilies = []named{
	{"AF_UNSPEC", 0}, {"AF_UNIX", afUnix}, {"AF_INET", afInet}, {"AF_AX25", 3},
	{"AF_IPX", 4}, {"AF_APPLETALK", 5}, {"AF_NETROM", 6}, {"AF_BRIDGE", 7},
	{"AF_ATMPVC", 8}, {"AF_X25", 9}, {"AF_INET6", afInet6}, {"AF_ROSE", 11},
	{"AF_DECnet", 12}, {"AF_NETBEUI", 13}, {"AF_SECURITY", 14}, {"AF_KEY", 15},
	{"AF_NETLINK", afNetlink}, {"AF_PACKET", afPacket}, {"AF_ASH", 18},
	{"AF_ECONET", 19}, {"AF_ATMSVC", 20}, {"AF_RDS", 21}, {"AF_SNA", 22},
	{"AF_IRDA", 23}, {"AF_PPPOX", 24}, {"AF_WANPIPE", 25}, {"AF_LLC", 26},
	{"AF_IB", 27}, {"AF_MPLS", 28}, {"AF_CAN", 29}, {"AF_TIPC", 30},
	{"AF_BLUETOOTH", 31}, {"AF_IUCV", 32}, {"AF_RXRPC", 33}, {"AF_ISDN", 34},
	{"AF_PHONET", 35}, {"AF_IEEE802154", 36}, {"AF_CAIF", 37}, {"AF_ALG", 38},
	{"AF_NFC", 39}, {"AF_VSOCK", 40}, {"AF_KCM", 41}, {"AF_QIPCRTR", 42},
	{"AF_SMC", 43}, {"AF_XDP", 44}, {"AF_MCTP", 45},
}

// Socket types (socket: argument 1; the low 4 bits, the rest are flags).
var socketTypes = []named{
	{"SOCK_STREAM", 1}, {"SOCK_DGRAM", 2}, {"SOCK_RAW", 3}, {"SOCK_RDM", 4},
	{"SOCK_SEQPACKET", 5}, {"SOCK_DCCP", 6}, {"SOCK_PACKET", 10},
}

var socketTypeFlags = []named{
	{"SOCK_NONBLOCK", 0o4000}, {"SOCK_CLOEXEC", 0o2000000},
}

// Namespace flags of clone(2) and unshare(2). A clone carrying any of them
// would build a new namespace from inside the jail: CLONE_NEWUSER needs no
// privilege at all and hands the child every capability over its new
// namespaces, the doorway to most namespace-related kernel exploits.
const (
	cloneNewNS     = 0x00020000
	cloneNewCgroup = 0x02000000
	cloneNewUTS    = 0x04000000
	cloneNewIPC    = 0x08000000
	cloneNewUser   = 0x10000000
	cloneNewPID    = 0x20000000
	cloneNewNet    = 0x40000000

	cloneNamespaceFlags = cloneNewNS | cloneNewCgroup | cloneNewUTS | cloneNewIPC |
		cloneNewUser | cloneNewPID | cloneNewNet

	cloneVM    = 0x00000100
	cloneVfork = 0x00004000
	sigchld    = 17
)

var cloneFlags = []named{
	{"CLONE_VM", cloneVM}, {"CLONE_FS", 0x200}, {"CLONE_FILES", 0x400},
	{"CLONE_SIGHAND", 0x800}, {"CLONE_PIDFD", 0x1000}, {"CLONE_PTRACE", 0x2000},
	{"CLONE_VFORK", cloneVfork}, {"CLONE_PARENT", 0x8000}, {"CLONE_THREAD", 0x10000},
	{"CLONE_NEWNS", cloneNewNS}, {"CLONE_SYSVSEM", 0x40000}, {"CLONE_SETTLS", 0x80000},
	{"CLONE_PARENT_SETTID", 0x100000}, {"CLONE_CHILD_CLEARTID", 0x200000},
	{"CLONE_DETACHED", 0x400000}, {"CLONE_UNTRACED", 0x800000},
	{"CLONE_CHILD_SETTID", 0x1000000}, {"CLONE_NEWCGROUP", cloneNewCgroup},
	{"CLONE_NEWUTS", cloneNewUTS}, {"CLONE_NEWIPC", cloneNewIPC},
	{"CLONE_NEWUSER", cloneNewUser}, {"CLONE_NEWPID", cloneNewPID},
	{"CLONE_NEWNET", cloneNewNet}, {"CLONE_IO", 0x80000000},
}

// ioctl requests (argument 1). The kernel's ioctl takes an unsigned int, so
// only the low 32 bits of the register count.
const (
	tcgets     = 0x5401
	tcsets     = 0x5402
	tiocsctty  = 0x540E
	tiocgpgrp  = 0x540F
	tiocspgrp  = 0x5410
	tiocsti    = 0x5412 // pushes bytes into a terminal's input queue: keystroke injection into the host shell
	tiocgwinsz = 0x5413
	tiocswinsz = 0x5414
	fionread   = 0x541B
	tioclinux  = 0x541C // on a virtual console, TIOCL_PASTESEL pastes the selection: the same injection
	tiocsetd   = 0x5423 // attaches a line discipline: n_gsm, n_hdlc were kernel exploit vectors
	fionbio    = 0x5421
	fionclex   = 0x5450
	fioclex    = 0x5451
	fioasync   = 0x5452
	tiocgptn   = 0x80045430

	// The seccomp listener's own ioctls. The payload never holds a listener
	// (the fd is O_CLOEXEC, the init closes it, seccomp() is refused), but if
	// one leaked, SECCOMP_IOCTL_NOTIF_SEND with the CONTINUE flag would let
	// the jail answer "go ahead" to its own refused calls.
	seccompIoctlNotifSend  = 0xC0182101
	seccompIoctlNotifAddfd = 0x40182103
)

var ioctlRequests = []named{
	{"TCGETS", tcgets}, {"TCSETS", tcsets}, {"TCSETSW", 0x5403}, {"TCSETSF", 0x5404},
	{"TCSBRK", 0x5409}, {"TCXONC", 0x540A}, {"TCFLSH", 0x540B},
	{"TIOCEXCL", 0x540C}, {"TIOCNXCL", 0x540D}, {"TIOCSCTTY", tiocsctty},
	{"TIOCGPGRP", tiocgpgrp}, {"TIOCSPGRP", tiocspgrp}, {"TIOCOUTQ", 0x5411},
	{"TIOCSTI", tiocsti}, {"TIOCGWINSZ", tiocgwinsz}, {"TIOCSWINSZ", tiocswinsz},
	{"TIOCMGET", 0x5415}, {"TIOCMSET", 0x5418}, {"FIONREAD", fionread},
	{"TIOCLINUX", tioclinux}, {"TIOCCONS", 0x541D}, {"FIONBIO", fionbio},
	{"TIOCNOTTY", 0x5422}, {"TIOCSETD", tiocsetd}, {"TIOCGETD", 0x5424},
	{"TIOCGSID", 0x5429}, {"TIOCGPTN", tiocgptn}, {"TIOCSPTLCK", 0x40045431},
	{"FIONCLEX", fionclex}, {"FIOCLEX", fioclex}, {"FIOASYNC", fioasync},
	{"SECCOMP_IOCTL_NOTIF_RECV", 0xC0502100}, {"SECCOMP_IOCTL_NOTIF_SEND", seccompIoctlNotifSend},
	{"SECCOMP_IOCTL_NOTIF_ID_VALID", 0x40082102}, {"SECCOMP_IOCTL_NOTIF_ADDFD", seccompIoctlNotifAddfd},
}

// prctl options (argument 0).
const (
	prSetPdeathsig       = 1
	prGetPdeathsig       = 2
	prGetDumpable        = 3
	prSetDumpable        = 4
	prGetKeepcaps        = 7
	prSetName            = 15
	prGetName            = 16
	prGetSeccomp         = 21
	prSetSeccomp         = 22
	prCapbsetRead        = 23
	prGetTimerslack      = 30
	prSetTimerslack      = 29
	prSetChildSubreaper  = 36
	prGetChildSubreaper  = 37
	prSetNoNewPrivs      = 38
	prGetNoNewPrivs      = 39
	prSetTHPDisable      = 41
	prGetTHPDisable      = 42
	prCapAmbient         = 47
	prGetSpeculationCtrl = 52
	prSetVMA             = 0x53564d41
)

var prctlOptions = []named{
	{"PR_SET_PDEATHSIG", prSetPdeathsig}, {"PR_GET_PDEATHSIG", prGetPdeathsig},
	{"PR_GET_DUMPABLE", prGetDumpable}, {"PR_SET_DUMPABLE", prSetDumpable},
	{"PR_GET_KEEPCAPS", prGetKeepcaps}, {"PR_SET_KEEPCAPS", 8},
	{"PR_SET_NAME", prSetName}, {"PR_GET_NAME", prGetName},
	{"PR_GET_SECCOMP", prGetSeccomp}, {"PR_SET_SECCOMP", prSetSeccomp},
	{"PR_CAPBSET_READ", prCapbsetRead}, {"PR_CAPBSET_DROP", 24},
	{"PR_GET_TSC", 25}, {"PR_SET_TSC", 26}, {"PR_GET_SECUREBITS", 27},
	{"PR_SET_SECUREBITS", 28}, {"PR_SET_TIMERSLACK", prSetTimerslack},
	{"PR_GET_TIMERSLACK", prGetTimerslack}, {"PR_SET_MM", 35},
	{"PR_SET_CHILD_SUBREAPER", prSetChildSubreaper}, {"PR_GET_CHILD_SUBREAPER", prGetChildSubreaper},
	{"PR_SET_NO_NEW_PRIVS", prSetNoNewPrivs}, {"PR_GET_NO_NEW_PRIVS", prGetNoNewPrivs},
	{"PR_GET_TID_ADDRESS", 40}, {"PR_SET_THP_DISABLE", prSetTHPDisable},
	{"PR_GET_THP_DISABLE", prGetTHPDisable}, {"PR_CAP_AMBIENT", prCapAmbient},
	{"PR_GET_SPECULATION_CTRL", prGetSpeculationCtrl}, {"PR_SET_SPECULATION_CTRL", 53},
	{"PR_SET_IO_FLUSHER", 57}, {"PR_SET_SYSCALL_USER_DISPATCH", 59},
	{"PR_SCHED_CORE", 62}, {"PR_SET_MDWE", 65}, {"PR_SET_PTRACER", 0x59616d61},
	{"PR_SET_VMA", prSetVMA},
}

// Personas (personality: argument 0). The kernel takes an unsigned int.
const (
	perLinux         = 0x0000000
	addrNoRandomize  = 0x0040000
	personalityQuery = 0xffffffff
)

var personaFlags = []named{
	{"UNAME26", 0x0020000}, {"ADDR_NO_RANDOMIZE", addrNoRandomize},
	{"FDPIC_FUNCPTRS", 0x0080000}, {"MMAP_PAGE_ZERO", 0x0100000},
	{"ADDR_COMPAT_LAYOUT", 0x0200000}, {"READ_IMPLIES_EXEC", 0x0400000},
	{"ADDR_LIMIT_32BIT", 0x0800000}, {"SHORT_INODE", 0x1000000},
	{"WHOLE_SECONDS", 0x2000000}, {"STICKY_TIMEOUTS", 0x4000000},
	{"ADDR_LIMIT_3GB", 0x8000000},
}

func nameOf(table []named, v uint64) (string, bool) {
	for _, n := range table {
		if n.value == v {
			return n.name, true
		}
	}
	return "", false
}
