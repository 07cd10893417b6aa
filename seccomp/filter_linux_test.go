package seccomp

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

func init() {
	helperModes["status"] = helperStatus
}

// TestEveryRefusedCallIsRefusedAndReported makes each refused call of each
// policy, raw, on the filtered thread: each must fail with EPERM (the
// kernel, reached with all-ones arguments, would have said EFAULT, EBADF or
// EINVAL, or for vhangup and sync succeeded) and reach the supervisor once.
func TestEveryRefusedCallIsRefusedAndReported(t *testing.T) {
	for _, name := range Names() {
		for _, how := range []string{"", "+compile"} { // embedded program, and compiled by Load
			t.Run(name+how, func(t *testing.T) {
				p, _ := Lookup(name)
				ps := refusedProbes(p)
				run := runProbes(t, name+how, ps)
				for _, pr := range ps {
					b, ok := run.blocked(pr.Call)
					if !ok {
						t.Errorf("%s was not reported", pr.Call)
						continue
					}
					if b.Count != 1 {
						t.Errorf("%s reported %d times, want 1", pr.Call, b.Count)
					}
				}
				if len(run.Blocked) != len(ps) {
					t.Errorf("%d distinct calls reported, want %d: %s", len(run.Blocked), len(ps), blockedSummary(run.Blocked))
				}
			})
		}
	}
}

// pythonArgumentProbes try the doors an argument opens, and the same calls
// with arguments the policy allows.
var pythonArgumentProbes = []probe{
	{Name: "plain syscall", Call: "getpid"},
	{Name: "AF_UNIX socket", Call: "socket", Args: [6]uint64{afUnix, 1, 0}},
	{Name: "AF_INET socket", Call: "socket", Args: [6]uint64{afInet, 2, 0}},
	{Name: "AF_INET6 socket", Call: "socket", Args: [6]uint64{afInet6, 1, 0}, Kernel: true},
	// The kernel reads the domain as an int; garbage above bit 31 is
	// AF_UNIX to it, and to the filter.
	{Name: "AF_UNIX socket, high bits set", Call: "socket", Args: [6]uint64{0xffffffff00000000 | afUnix, 1, 0}},
	// As root this would open a raw packet socket: the filter must stop it.
	{Name: "AF_PACKET raw socket", Call: "socket", Args: [6]uint64{afPacket, 3, 0x0300}, Want: unix.EPERM},
	{Name: "AF_NETLINK socket", Call: "socket", Args: [6]uint64{afNetlink, 3, 0}, Want: unix.EPERM},
	{Name: "AF_PACKET, high bits hide nothing", Call: "socket", Args: [6]uint64{0x100000000 | afPacket, 3, 0}, Want: unix.EPERM},
	{Name: "AF_UNIX socketpair", Call: "socketpair", Args: [6]uint64{afUnix, 1, 0, scratchArg}},
	{Name: "AF_TIPC socketpair", Call: "socketpair", Args: [6]uint64{30, 5, 0, scratchArg}, Want: unix.EPERM},

	{Name: "fork-like clone", Call: "clone", Args: [6]uint64{sigchld}},
	{Name: "clone into a new user namespace", Call: "clone", Args: [6]uint64{cloneNewUser | sigchld}, Want: unix.EPERM},
	{Name: "clone into a new network namespace", Call: "clone", Args: [6]uint64{cloneNewNet | sigchld}, Want: unix.EPERM},
	{Name: "clone with every namespace flag", Call: "clone", Args: [6]uint64{cloneNamespaceFlags | sigchld}, Want: unix.EPERM},
	// clone3's flags are in memory: ENOSYS, unreported, so glibc falls back.
	{Name: "clone3 (user namespace in memory)", Call: "clone3", Args: [6]uint64{scratchArg, 88}, Want: unix.ENOSYS},

	{Name: "FIONREAD on a pipe", Call: "ioctl", Args: [6]uint64{0, fionread, scratchArg}, Fd: "pipe"},
	// The kernel drops the upper half of the request: this is FIONREAD.
	{Name: "FIONREAD with high bits set", Call: "ioctl", Args: [6]uint64{0, 0xdeadbeef00000000 | fionread, scratchArg}, Fd: "pipe"},
	{Name: "TCGETS on /dev/null reaches the kernel", Call: "ioctl", Args: [6]uint64{0, tcgets, scratchArg}, Fd: "null", Want: unix.ENOTTY},
	{Name: "TIOCSTI", Call: "ioctl", Args: [6]uint64{0, tiocsti, scratchArg}, Fd: "null", Want: unix.EPERM},
	// CVE-2017-5226 / CVE-2019-10063: a 64-bit compare misses this.
	{Name: "TIOCSTI with high bits set", Call: "ioctl", Args: [6]uint64{0, 0xdeadbeef00000000 | tiocsti, scratchArg}, Fd: "null", Want: unix.EPERM},
	{Name: "TIOCLINUX", Call: "ioctl", Args: [6]uint64{0, tioclinux, scratchArg}, Fd: "null", Want: unix.EPERM},
	{Name: "TIOCSETD", Call: "ioctl", Args: [6]uint64{0, tiocsetd, scratchArg}, Fd: "null", Want: unix.EPERM},
	{Name: "SECCOMP_IOCTL_NOTIF_SEND", Call: "ioctl", Args: [6]uint64{0, seccompIoctlNotifSend, scratchArg}, Fd: "null", Want: unix.EPERM},

	{Name: "PR_SET_NAME", Call: "prctl", Args: [6]uint64{prSetName, scratchArg}},
	{Name: "PR_GET_NO_NEW_PRIVS", Call: "prctl", Args: [6]uint64{prGetNoNewPrivs}},
	{Name: "PR_SET_SECCOMP", Call: "prctl", Args: [6]uint64{prSetSeccomp, 2, scratchArg}, Want: unix.EPERM},
	{Name: "PR_SET_MM", Call: "prctl", Args: [6]uint64{35, 1, 0}, Want: unix.EPERM},
	{Name: "PR_SET_PTRACER", Call: "prctl", Args: [6]uint64{0x59616d61, allOnes}, Want: unix.EPERM},
	{Name: "PR_SET_SYSCALL_USER_DISPATCH", Call: "prctl", Args: [6]uint64{59, 0}, Want: unix.EPERM},

	{Name: "personality query", Call: "personality", Args: [6]uint64{personalityQuery}},
	{Name: "personality PER_LINUX", Call: "personality", Args: [6]uint64{perLinux}},
	{Name: "personality READ_IMPLIES_EXEC", Call: "personality", Args: [6]uint64{0x0400000}, Want: unix.EPERM},
	{Name: "personality MMAP_PAGE_ZERO", Call: "personality", Args: [6]uint64{0x0100000}, Want: unix.EPERM},

	{Name: "prlimit64 of self", Call: "prlimit64", Args: [6]uint64{0, unix.RLIMIT_NOFILE, 0, scratchArg}},
	{Name: "prlimit64 of another process", Call: "prlimit64", Args: [6]uint64{1, unix.RLIMIT_NOFILE, 0, scratchArg}, Want: unix.EPERM},

	// What OpenBLAS and allocators do with their own memory reaches the
	// kernel (whose answer depends on CONFIG_NUMA); moving another
	// process's pages does not.
	{Name: "mbind of own range", Call: "mbind", Args: [6]uint64{0, 0, 0}, Kernel: true},
	{Name: "set_mempolicy MPOL_DEFAULT", Call: "set_mempolicy", Args: [6]uint64{0, 0, 0}, Kernel: true},
	{Name: "get_mempolicy", Call: "get_mempolicy", Args: [6]uint64{0, 0, 0, 0, 0}, Kernel: true},
	{Name: "move_pages of self", Call: "move_pages", Args: [6]uint64{0, 0, 0, 0, 0, 0}, Kernel: true},
	{Name: "move_pages of another process", Call: "move_pages", Args: [6]uint64{1, 1, scratchArg, 0, scratchArg, 0}, Want: unix.EPERM},

	// Calls the policy does not know: newer than it, or no call at all.
	{Name: "listmount (458, newer than the policy)", Call: "#458", Args: ones, Want: unix.ENOSYS},
	{Name: "number 1000", Call: "#1000", Want: unix.ENOSYS},
	{Name: "landlock (absent)", Call: "landlock_create_ruleset", Args: [6]uint64{0, 0, 1}, Want: unix.ENOSYS},
}

func TestPythonArgumentRules(t *testing.T) {
	run := runProbes(t, "python", pythonArgumentProbes)
	t.Logf("reported: %s", blockedSummary(run.Blocked))
	want := map[string]string{ // call: the example of its first refusal
		"socket":      "socket(AF_PACKET, SOCK_RAW, 768)",
		"socketpair":  "socketpair(AF_TIPC, SOCK_SEQPACKET, 0, ",
		"clone":       "clone(CLONE_NEWUSER|SIGCHLD, 0x0, 0x0, 0x0, 0x0)",
		"ioctl":       "ioctl(",
		"prctl":       "prctl(PR_SET_SECCOMP, 0x2, ",
		"personality": "personality(PER_LINUX|READ_IMPLIES_EXEC)",
		"prlimit64":   "prlimit64(1, 7, 0x0, ",
		"move_pages":  "move_pages(",
	}
	counts := map[string]int{}
	for _, pr := range pythonArgumentProbes {
		if pr.Want == unix.EPERM {
			counts[pr.Call]++
		}
	}
	for call, example := range want {
		b, ok := run.blocked(call)
		if !ok {
			t.Errorf("%s: not reported", call)
			continue
		}
		if !strings.HasPrefix(b.Example, example) {
			t.Errorf("%s: example %q, want prefix %q", call, b.Example, example)
		}
		if b.Count != counts[call] {
			t.Errorf("%s: reported %d times, want %d", call, b.Count, counts[call])
		}
	}
	if len(run.Blocked) != len(want) {
		t.Errorf("reported %s; want only %d calls", blockedSummary(run.Blocked), len(want))
	}
	if b, _ := run.blocked("ioctl"); !strings.Contains(b.Example, "TIOCSTI") {
		t.Errorf("ioctl example %q does not name TIOCSTI", b.Example)
	}
}

func TestStrictArgumentRules(t *testing.T) {
	ps := []probe{
		{Name: "AF_UNIX socket", Call: "socket", Args: [6]uint64{afUnix, 1, 0}},
		{Name: "AF_INET socket", Call: "socket", Args: [6]uint64{afInet, 2, 0}, Want: unix.EPERM},
		{Name: "AF_INET6 socket", Call: "socket", Args: [6]uint64{afInet6, 1, 0}, Want: unix.EPERM},
		{Name: "FIONREAD", Call: "ioctl", Args: [6]uint64{0, fionread, scratchArg}, Fd: "pipe"},
		{Name: "FIOCLEX", Call: "ioctl", Args: [6]uint64{0, fioclex}, Fd: "pipe"},
		{Name: "TCSETS", Call: "ioctl", Args: [6]uint64{0, tcsets, scratchArg}, Fd: "null", Want: unix.EPERM},
		{Name: "TIOCSTI with high bits set", Call: "ioctl", Args: [6]uint64{0, 0xdeadbeef00000000 | tiocsti, scratchArg}, Fd: "null", Want: unix.EPERM},
		{Name: "PR_SET_DUMPABLE", Call: "prctl", Args: [6]uint64{prSetDumpable, 1}, Want: unix.EPERM},
		{Name: "PR_SET_NAME", Call: "prctl", Args: [6]uint64{prSetName, scratchArg}},
		{Name: "ADDR_NO_RANDOMIZE", Call: "personality", Args: [6]uint64{addrNoRandomize}, Want: unix.EPERM},
		{Name: "clone into a new user namespace", Call: "clone", Args: [6]uint64{cloneNewUser | sigchld}, Want: unix.EPERM},
		{Name: "fork-like clone", Call: "clone", Args: [6]uint64{sigchld}},
		{Name: "memfd_create", Call: "memfd_create", Args: [6]uint64{scratchArg, 0}, Want: unix.EPERM},
	}
	run := runProbes(t, "strict", ps)
	if len(run.Blocked) != 6 {
		t.Errorf("reported %s; want socket, ioctl, prctl, personality, clone, memfd_create", blockedSummary(run.Blocked))
	}
}

// TestForeignABIKillsTheProcess: an x32 system call (bit 30 of the number)
// on x86_64 would otherwise be a second, unfiltered numbering of every call.
func TestForeignABIKillsTheProcess(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("x32 exists only on x86_64")
	}
	run := runHelper(t, "x32", "python", "")
	var exit *exec.ExitError
	if !errors.As(run.Err, &exit) {
		t.Fatalf("helper: %v, want it killed; stdout %q", run.Err, run.Stdout)
	}
	ws := exit.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGSYS {
		t.Fatalf("helper ended with %v, want killed by SIGSYS; stdout %q", exit, run.Stdout)
	}
	if len(run.Blocked) != 0 {
		t.Errorf("reported %s, want nothing", blockedSummary(run.Blocked))
	}
}

// statusReport is what helperStatus saw.
type statusReport struct {
	Thread       string        `json:"thread"`        // Seccomp lines of the filtered thread
	Others       []string      `json:"others"`        // of freshly locked goroutines' threads
	SecondFilter syscall.Errno `json:"second_filter"` // seccomp(SET_MODE_FILTER) with an allow-all program
	PrctlFilter  syscall.Errno `json:"prctl_filter"`  // prctl(PR_SET_SECCOMP) with it
	Unshare      syscall.Errno `json:"unshare"`       // unshare(0) afterwards
}

func seccompLines(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "Seccomp") {
			out = append(out, strings.Join(strings.Fields(l), " "))
		}
	}
	return strings.Join(out, "; ")
}

func helperStatus(string) int {
	var r statusReport
	r.Thread = seccompLines("/proc/thread-self/status")
	// New goroutines that lock threads make the runtime start new Ms; none
	// may inherit the filter (the runtime starts them from its template
	// thread, never from a locked one).
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			s := seccompLines("/proc/thread-self/status")
			mu.Lock()
			r.Others = append(r.Others, s)
			mu.Unlock()
			// Exiting locked discards the thread, so each goroutine gets a new one.
		}()
		wg.Wait()
	}
	allowAll := []unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW}}
	fprog := unix.SockFprog{Len: 1, Filter: &allowAll[0]}
	_, _, r.SecondFilter = unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog)))
	_, _, r.PrctlFilter = unix.Syscall(unix.SYS_PRCTL, unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&fprog)))
	_, _, r.Unshare = unix.Syscall(unix.SYS_UNSHARE, 0, 0, 0)
	return writeJSON(r)
}

// TestFilterIsOnThisThreadOnlyAndCannotBeLoosened: the filter is in force
// (Seccomp: 2) on the loading thread alone, a permissive second filter is
// refused both ways, and refused calls stay refused afterwards.
func TestFilterIsOnThisThreadOnlyAndCannotBeLoosened(t *testing.T) {
	run := runHelper(t, "status", "python", "")
	if run.Err != nil {
		t.Fatalf("helper: %v\n%s", run.Err, run.Stderr)
	}
	var r statusReport
	if err := json.Unmarshal(run.Stdout, &r); err != nil {
		t.Fatalf("%q: %v", run.Stdout, err)
	}
	if r.Thread != "Seccomp: 2; Seccomp_filters: 1" {
		t.Errorf("filtered thread: %q, want Seccomp: 2 with one filter", r.Thread)
	}
	for _, o := range r.Others {
		if o != "Seccomp: 0; Seccomp_filters: 0" {
			t.Errorf("another thread of the process: %q, want no filter (no TSYNC)", o)
		}
	}
	if r.SecondFilter != unix.EPERM || r.PrctlFilter != unix.EPERM {
		t.Errorf("second filter: seccomp() = %v, prctl() = %v; want EPERM for both", r.SecondFilter, r.PrctlFilter)
	}
	if r.Unshare != unix.EPERM {
		t.Errorf("unshare after the attempts: %v, want EPERM", r.Unshare)
	}
	got := blockedSummary(run.Blocked)
	for _, want := range []string{"prctl(PR_SET_SECCOMP", "seccomp(0x1, 0x0", "unshare(0)"} {
		if !strings.Contains(got, want) {
			t.Errorf("report %q lacks %q", got, want)
		}
	}
}

// TestLoadRequiresNoNewPrivs runs Load on a fresh thread of this process that
// has not set no_new_privs; the thread is thrown away afterwards.
func TestLoadRequiresNoNewPrivs(t *testing.T) {
	p, _ := Lookup("python")
	errc := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		fd, err := Load(p)
		if err == nil {
			unix.Close(fd)
			err = fmt.Errorf("Load succeeded without no_new_privs")
		} else if errors.Is(err, ErrNoNewPrivs) {
			err = nil
		}
		errc <- err
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// TestAttackOtherProcessMemory: the NUMA calls an allocator makes on its own
// memory are allowed, so check that the ones acting on another process's
// memory still are not, under both policies: moving or migrating its pages
// (which also reveals where they are) and copying from or into it.
func TestAttackOtherProcessMemory(t *testing.T) {
	ps := []probe{
		{Name: "move_pages of pid 1", Call: "move_pages", Args: [6]uint64{1, 1, scratchArg, 0, scratchArg, 0}, Want: unix.EPERM},
		{Name: "move_pages of pid 1, high bits set", Call: "move_pages", Args: [6]uint64{0xffffffff00000001, 1, scratchArg, 0, scratchArg, 0}, Want: unix.EPERM},
		{Name: "migrate_pages of pid 1", Call: "migrate_pages", Args: [6]uint64{1, 64, scratchArg, scratchArg}, Want: unix.EPERM},
		{Name: "process_vm_readv of pid 1", Call: "process_vm_readv", Args: [6]uint64{1, scratchArg, 1, scratchArg, 1, 0}, Want: unix.EPERM},
		{Name: "process_vm_writev of pid 1", Call: "process_vm_writev", Args: [6]uint64{1, scratchArg, 1, scratchArg, 1, 0}, Want: unix.EPERM},
	}
	for _, policy := range []string{"python", "strict"} {
		t.Run(policy, func(t *testing.T) {
			run := runProbes(t, policy, ps)
			for _, c := range []string{"move_pages", "migrate_pages", "process_vm_readv", "process_vm_writev"} {
				if _, ok := run.blocked(c); !ok {
					t.Errorf("%s was not reported", c)
				}
			}
		})
	}
}
