package proctest

import (
	"strconv"
	"strings"
)

// RefusedLoop is a Python program that calls a refused system call (each
// one a round trip to stockade's supervisor) from 1+extra threads until the
// run is stopped: the attack on the supervisor's CPU budget, which the jail
// and server packages both make. It prints "made N" after its first call
// and every 256th, and "NOT REFUSED" for a call that succeeded, so that a
// test can tell a machine too slow to judge the budget (few calls made)
// from a filter that refused nothing (calls made, none reported refused).
func RefusedLoop(extra int) string {
	return `
import ctypes, os, threading
libc = ctypes.CDLL(None, use_errno=True)
made = [0]
def loop():
    while True:
        # ptrace(PTRACE_TRACEME): refused, answered EPERM by stockade
        if libc.syscall(101, 0, 0, 0, 0) == 0:
            os.write(1, b"NOT REFUSED\n")
        made[0] += 1
        if made[0] == 1 or made[0] % 256 == 0:
            os.write(1, b"made %d\n" % made[0])
for _ in range(` + strconv.Itoa(extra) + `):
    threading.Thread(target=loop, daemon=True).start()
loop()
`
}

// RefusedLoopMade reads RefusedLoop's output: how many calls it had made
// by its last report (a lower bound: the threads' counting races), and
// whether one of them was not refused.
func RefusedLoopMade(stdout string) (made int, notRefused bool) {
	for _, line := range strings.Split(stdout, "\n") {
		if n, ok := strings.CutPrefix(line, "made "); ok {
			if v, err := strconv.Atoi(n); err == nil && v > made {
				made = v
			}
		}
		notRefused = notRefused || line == "NOT REFUSED"
	}
	return made, notRefused
}
