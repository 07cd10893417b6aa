package proctest

import "strconv"

// RefusedLoop is a Python program that calls a refused system call (each
// one a round trip to stockade's supervisor) from 1+extra threads until the
// run is stopped: the attack on the supervisor's CPU budget, which the jail
// and server packages both make.
func RefusedLoop(extra int) string {
	return `
import ctypes, threading
libc = ctypes.CDLL(None, use_errno=True)
def loop():
    while True:
        libc.syscall(101, 0, 0, 0, 0)  # ptrace(PTRACE_TRACEME): refused, answered EPERM by stockade
for _ in range(` + strconv.Itoa(extra) + `):
    threading.Thread(target=loop, daemon=True).start()
loop()
`
}
