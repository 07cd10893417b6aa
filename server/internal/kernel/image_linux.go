package kernel

import (
	"errors"
	"fmt"
	"math/bits"
	"os"
	"strconv"
	"strings"
)

// A cell runs in the driver's own process: it can clear close-on-exec on
// the driver's descriptor and execve a program of its own, which keeps
// the pid (and so the kernel's credentials on every frame) and answers
// the next execs as it likes. What the server measures from outside to
// tell that the process is still the program it started is the layout
// execve gave its memory, in /proc/PID/stat: where the code, data, heap
// and stack begin and end, and where the arguments and environment lie.
// Each execve draws them afresh (ASLR: the stack's top over 2^22 pages,
// its first frame over 8 KiB, the heap over 32 MiB), and nothing but
// prctl(PR_SET_MM), which every seccomp policy refuses, sets them after
// exec. A program that turns ASLR off for its exec (personality
// ADDR_NO_RANDOMIZE, allowed by the python policy) and is crafted to
// fit reaches only a driver whose arguments lie within a few MiB of the
// top of the address space (execve's arguments are at most 6 MiB, and
// with ASLR off the stack's top is that top): about one driver in 2,700,
// which a cell can tell and an attacker keep making sessions for. So a
// session whose driver drew such a layout is not handed out: its jail is
// destroyed and another made (forgeable). On a host with ASLR off
// (kernel.randomize_va_space = 0, or the server run under setarch -R)
// every exec draws the same layout and this proves nothing; the server
// says so in its log (docs/security.md).

// Image is the layout of a process's memory as execve made it:
// /proc/PID/stat's start_code, end_code, start_stack (fields 26-28),
// start_data, end_data, start_brk, arg_start, arg_end, env_start and
// env_end (45-51).
type Image [10]uint64

// imageFields are those fields' numbers, as proc(5) counts them.
var imageFields = [10]int{26, 27, 28, 45, 46, 47, 48, 49, 50, 51}

// ErrNoImage says the process has no memory left to lay out: it is
// exiting, or a zombie.
var ErrNoImage = errors.New("the process has no memory image (it is exiting)")

// ReadImage reads pid's layout. The kernel shows it only to a
// reader allowed to ptrace the process (the server, as root, is), and
// zeros to anyone else: all zeros is an error, never a layout.
func ReadImage(pid int) (Image, error) {
	var img Image
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return img, fmt.Errorf("read the driver's layout: %w", err)
	}
	// The command name, in parentheses, may hold anything; the fields
	// after its last ')' are the kernel's, the state (field 3) first.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return img, fmt.Errorf("/proc/%d/stat: no ')' in %q", pid, b)
	}
	f := strings.Fields(string(b[i+1:]))
	zero := true
	for k, field := range imageFields {
		if field-3 >= len(f) {
			return img, fmt.Errorf("/proc/%d/stat: %d fields, want %d", pid, len(f)+2, field)
		}
		v, err := strconv.ParseUint(f[field-3], 10, 64)
		if err != nil {
			return img, fmt.Errorf("/proc/%d/stat field %d: %w", pid, field, err)
		}
		img[k] = v
		zero = zero && v == 0
	}
	if zero {
		if len(f) > 0 && (f[0] == "Z" || f[0] == "X") {
			return img, ErrNoImage
		}
		return img, fmt.Errorf("/proc/%d/stat: the memory layout reads as zeros (the server may not ptrace the driver, or it is exiting)", pid)
	}
	return img, nil
}

// forgeableWindow is how near the top of the address space a driver's
// arguments may begin before a program exec'd with ASLR off could be
// crafted to match its layout: execve takes at most 6 MiB of arguments
// and environment (fs/exec.c, bprm_stack_limits), above them lie the
// file name and the stack's top, which with ASLR off is the top of the
// address space (x86-64's 2^47, arm64's 2^48 less a page at most).
const forgeableWindow = 16 << 20

// Forgeable says whether img's arguments lie in that window. With ASLR
// on, one driver in about 1,000 does.
func (img Image) Forgeable() bool {
	argStart := img[6]
	top := uint64(1) << bits.Len64(argStart) // the power of two above it
	return top-argStart < forgeableWindow
}

// ASLROff says whether pid's execs draw no random layout: ASLR off for
// the host, or for the process (ADDR_NO_RANDOMIZE in its personality,
// inherited from whoever started the server).
func ASLROff(pid int) bool {
	if b, err := os.ReadFile("/proc/sys/kernel/randomize_va_space"); err == nil && strings.TrimSpace(string(b)) == "0" {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/personality")
	if err != nil {
		return false
	}
	p, err := strconv.ParseUint(strings.TrimSpace(string(b)), 16, 32)
	return err == nil && p&addrNoRandomize != 0
}

// addrNoRandomize is ADDR_NO_RANDOMIZE (linux/personality.h).
const addrNoRandomize = 0x0040000

// Intact says whether the process pid still runs the program whose
// layout was img: the same layout (a new execve draws a new one), read
// while alive (the caller's pidfd, signal 0) says the pid was not reused.
func Intact(pid int, img Image, alive func() error) error {
	now, err := ReadImage(pid)
	if err == nil && alive() != nil {
		err = ErrNoImage
	}
	switch {
	case errors.Is(err, ErrNoImage):
		return errors.New("the driver's process ended as it answered: its answer cannot be vouched for")
	case err != nil:
		return err
	case now != img:
		return fmt.Errorf("the driver was replaced: its process runs another program (its memory layout in /proc/%d/stat changed, as only an execve changes it)", pid)
	}
	return nil
}
