package seccomp

import "testing"

func TestDescribe(t *testing.T) {
	cases := []struct {
		name string
		args [6]uint64
		want string
	}{
		{"socket", [6]uint64{afPacket, 3, 768}, "socket(AF_PACKET, SOCK_RAW, 768)"},
		{"socket", [6]uint64{afInet, 1 | 0o2000000 | 0o4000, 0}, "socket(AF_INET, SOCK_STREAM|SOCK_NONBLOCK|SOCK_CLOEXEC, 0)"},
		{"socket", [6]uint64{99, 2, 0}, "socket(99, SOCK_DGRAM, 0)"},
		{"socket", [6]uint64{0x100000000 | afPacket, 3, 0}, "socket(AF_PACKET (0x100000011), SOCK_RAW, 0)"},
		{"clone", [6]uint64{cloneNewUser | cloneNewNS | sigchld}, "clone(CLONE_NEWNS|CLONE_NEWUSER|SIGCHLD, 0x0, 0x0, 0x0, 0x0)"},
		{"clone", [6]uint64{cloneVM | cloneVfork | sigchld, 0x1000}, "clone(CLONE_VM|CLONE_VFORK|SIGCHLD, 0x1000, 0x0, 0x0, 0x0)"},
		{"clone", [6]uint64{0}, "clone(0, 0x0, 0x0, 0x0, 0x0)"},
		{"unshare", [6]uint64{cloneNewUser | 0x1}, "unshare(CLONE_NEWUSER|0x1)"},
		{"setns", [6]uint64{5, cloneNewNet}, "setns(5, CLONE_NEWNET)"},
		{"ioctl", [6]uint64{0, 0xdeadbeef00005412, 0x7ffd0000}, "ioctl(0, TIOCSTI (0xdeadbeef00005412), 0x7ffd0000)"},
		{"ioctl", [6]uint64{3, tioclinux, 0}, "ioctl(3, TIOCLINUX, 0x0)"},
		{"ioctl", [6]uint64{3, 0x1234, 0}, "ioctl(3, 0x1234, 0x0)"},
		{"ioctl", [6]uint64{^uint64(0), tiocsti, 0}, "ioctl(-1, TIOCSTI, 0x0)"},
		{"prctl", [6]uint64{prSetSeccomp, 2, 0x10}, "prctl(PR_SET_SECCOMP, 0x2, 0x10, 0x0, 0x0)"},
		{"prctl", [6]uint64{1234}, "prctl(1234, 0x0, 0x0, 0x0, 0x0)"},
		{"personality", [6]uint64{0x0400000}, "personality(PER_LINUX|READ_IMPLIES_EXEC)"},
		{"personality", [6]uint64{personalityQuery}, "personality(0xffffffff)"},
		{"personality", [6]uint64{0}, "personality(PER_LINUX)"},
		{"prlimit64", [6]uint64{1, 7, 0, 0x10}, "prlimit64(1, 7, 0x0, 0x10)"},
		{"mount", [6]uint64{1, 2, 3, 4, 5, 6}, "mount(0x1, 0x2, 0x3, 0x4, 0x5)"},
		{"vhangup", [6]uint64{1}, "vhangup()"},
		{"syscall_999", [6]uint64{1, 2, 3, 4, 5, 6}, "syscall_999(0x1, 0x2, 0x3, 0x4, 0x5, 0x6)"},
	}
	for _, c := range cases {
		if got := Describe(c.name, c.args); got != c.want {
			t.Errorf("Describe(%s, %x) = %q, want %q", c.name, c.args, got, c.want)
		}
	}
}
