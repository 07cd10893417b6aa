package seccomp

import (
	"fmt"
	"strconv"
	"strings"
)

// Describe renders a call as the report's example: socket(AF_PACKET,
// SOCK_RAW, 768). It names the arguments the policies rule on (socket
// families and types, clone and unshare flags, ioctl requests, prctl options,
// personas) and prints the others in hex; it never reads the caller's memory,
// whose contents could change between the read and the report.
func Describe(name string, args [6]uint64) string {
	n, ok := arity[name]
	if !ok {
		n = 6
	}
	parts := make([]string, n)
	for i := range parts {
		parts[i] = hex(args[i])
	}
	switch name {
	case "socket", "socketpair":
		parts[0] = low32Name(args[0], func(v uint32) string { return tableOrDecimal(socketFamilies, v) })
		parts[1] = low32Name(args[1], socketType)
		parts[2] = strconv.FormatUint(uint64(uint32(args[2])), 10)
	case "clone":
		parts[0] = low32Name(args[0], cloneFlagString)
	case "unshare":
		parts[0] = low32Name(args[0], func(v uint32) string { return flagString(cloneFlags, v, "0") })
	case "setns":
		parts[0] = fd(args[0])
		parts[1] = low32Name(args[1], func(v uint32) string { return flagString(cloneFlags, v, "0") })
	case "ioctl":
		parts[0] = fd(args[0])
		parts[1] = low32Name(args[1], func(v uint32) string { return tableOrHex(ioctlRequests, v) })
	case "prctl":
		parts[0] = low32Name(args[0], func(v uint32) string { return tableOrDecimal(prctlOptions, v) })
	case "personality":
		parts[0] = low32Name(args[0], persona)
	case "prlimit64":
		parts[0] = strconv.Itoa(int(int32(args[0])))
		parts[1] = strconv.FormatUint(args[1], 10)
	}
	return name + "(" + strings.Join(parts, ", ") + ")"
}

func hex(v uint64) string { return "0x" + strconv.FormatUint(v, 16) }

func fd(v uint64) string { return strconv.Itoa(int(int32(v))) }

// low32Name names the low 32 bits, which is what the kernel reads, and shows
// the whole register when the upper half is not zero, since that is the
// tell-tale of a filter-bypass attempt.
func low32Name(v uint64, name func(uint32) string) string {
	s := name(uint32(v))
	if v>>32 != 0 {
		return s + " (" + hex(v) + ")"
	}
	return s
}

func tableOrDecimal(t []named, v uint32) string {
	if s, ok := nameOf(t, uint64(v)); ok {
		return s
	}
	return strconv.FormatUint(uint64(v), 10)
}

func tableOrHex(t []named, v uint32) string {
	if s, ok := nameOf(t, uint64(v)); ok {
		return s
	}
	return hex(uint64(v))
}

// flagString renders v as NAME|NAME|0xrest.
func flagString(t []named, v uint32, zero string) string {
	if v == 0 {
		return zero
	}
	var out []string
	rest := uint64(v)
	for _, f := range t {
		if rest&f.value == f.value && f.value != 0 {
			out = append(out, f.name)
			rest &^= f.value
		}
	}
	if rest != 0 {
		out = append(out, hex(rest))
	}
	return strings.Join(out, "|")
}

func socketType(v uint32) string {
	s := tableOrDecimal(socketTypes, v&0xf)
	if f := flagString(socketTypeFlags, v&^0xf, ""); f != "" {
		s += "|" + f
	}
	return s
}

// cloneFlagString renders clone's flags; the low byte is the exit signal.
func cloneFlagString(v uint32) string {
	var out []string
	if f := flagString(cloneFlags, v&^0xff, ""); f != "" {
		out = append(out, f)
	}
	switch sig := v & 0xff; sig {
	case 0:
	case sigchld:
		out = append(out, "SIGCHLD")
	default:
		out = append(out, "signal "+strconv.Itoa(int(sig)))
	}
	if len(out) == 0 {
		return "0"
	}
	return strings.Join(out, "|")
}

func persona(v uint32) string {
	switch v {
	case personalityQuery:
		return "0xffffffff"
	case perLinux:
		return "PER_LINUX"
	}
	base := "PER_LINUX"
	if b := v & 0xff; b != 0 {
		base = fmt.Sprintf("PER_%#x", b)
	}
	if f := flagString(personaFlags, v&^0xff, ""); f != "" {
		return base + "|" + f
	}
	return base
}

// arity is how many arguments the calls a report is likely to show take on
// x86_64; a call not listed shows all six registers.
var arity = map[string]int{
	"socket": 3, "socketpair": 4, "clone": 5, "ioctl": 3, "prctl": 5, "personality": 1,
	"prlimit64": 4, "clone3": 2,
	"mount": 5, "umount2": 2, "fsopen": 2, "fsconfig": 5, "fsmount": 3, "fspick": 3,
	"move_mount": 5, "open_tree": 3, "mount_setattr": 5, "pivot_root": 2, "chroot": 1,
	"unshare": 1, "setns": 2, "ptrace": 4, "process_vm_readv": 6, "process_vm_writev": 6,
	"pidfd_getfd": 3, "kcmp": 5, "process_madvise": 5, "process_mrelease": 2,
	"get_robust_list": 3, "seccomp": 3, "bpf": 3, "perf_event_open": 5,
	"io_uring_setup": 2, "io_uring_enter": 6, "io_uring_register": 4, "userfaultfd": 1,
	"keyctl": 5, "add_key": 5, "request_key": 4, "fanotify_init": 2, "fanotify_mark": 5,
	"name_to_handle_at": 5, "open_by_handle_at": 3, "modify_ldt": 3, "set_thread_area": 1,
	"get_thread_area": 1, "memfd_secret": 1, "io_setup": 2, "io_destroy": 1,
	"io_getevents": 5, "io_submit": 3, "io_cancel": 3, "io_pgetevents": 6,
	"init_module": 3, "finit_module": 3, "delete_module": 2, "kexec_load": 4,
	"kexec_file_load": 5, "reboot": 4, "swapon": 2, "swapoff": 1, "settimeofday": 2,
	"clock_settime": 2, "adjtimex": 1, "clock_adjtime": 2, "acct": 1, "quotactl": 4,
	"quotactl_fd": 4, "iopl": 1, "ioperm": 3, "syslog": 3, "vhangup": 0,
	"sethostname": 2, "setdomainname": 2, "sync": 0, "mbind": 6, "set_mempolicy": 3,
	"get_mempolicy": 5, "set_mempolicy_home_node": 4, "migrate_pages": 4, "move_pages": 6,
	"cachestat": 4, "uselib": 1, "ustat": 2, "sysfs": 3, "lookup_dcookie": 3,
	"remap_file_pages": 5, "nfsservctl": 3,
	"shmget": 3, "shmat": 3, "shmdt": 1, "shmctl": 3, "semget": 3, "semop": 3,
	"semtimedop": 4, "semctl": 4, "msgget": 2, "msgsnd": 4, "msgrcv": 5, "msgctl": 3,
	"mq_open": 4, "mq_unlink": 1, "mq_timedsend": 5, "mq_timedreceive": 5, "mq_notify": 2,
	"mq_getsetattr": 3, "splice": 6, "tee": 4, "vmsplice": 4, "memfd_create": 2,
	"execveat": 5, "mincore": 3,
}
