# Attack: write escape sequences to the terminal the jail was started from
# (past the output cap and --json) and turn its ECHO off, so the caller's
# screen is rewritten and what they type next is hidden. Through fd 0, a
# reopened fd 0 and /dev/tty. The host checks that nothing reached its pty
# and that the pty's settings are unchanged.
import os, termios

reached = []
try:
    os.write(0, b"\x1b]0;stockade-selftest\x07\x1b[2J")
    reached.append("write fd 0")
except OSError:
    pass
for path in ("/proc/self/fd/0", "/dev/tty"):
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOCTTY)
        # Run as a normal user, the jail owns its stdin pipe and may
        # reopen it: a write end of its own pipe, not a terminal.
        if os.isatty(fd):
            os.write(fd, b"\x1b[2J")
            reached.append("write " + path)
        os.close(fd)
    except OSError:
        pass
for fd in (0, 1, 2):
    try:
        a = termios.tcgetattr(fd)
        a[3] &= ~termios.ECHO
        termios.tcsetattr(fd, termios.TCSANOW, a)
        reached.append("ECHO off on fd %d" % fd)
    except (OSError, termios.error):
        pass
print("OPEN " + ", ".join(reached) if reached else "HELD fd 0 is a pipe; no terminal to write to or reconfigure")
