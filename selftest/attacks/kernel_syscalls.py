# Attack: call each system call the policy never allows, raw, through
# libc's syscall(2), with every argument -1 (invalid for all of them, so
# that no call could do harm even through an open door). Arguments are
# NAME=NR. Held when each answers EPERM or ENOSYS; anything else (success,
# EINVAL, EFAULT, EBADF...) means the call reached the kernel.
import ctypes, errno, sys

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
reached = []
for arg in sys.argv[1:]:
    name, nr = arg.split("=")
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(int(nr)), *([ctypes.c_long(-1)] * 6))
    e = ctypes.get_errno()
    what = "ok" if r >= 0 else errno.errorcode.get(e, str(e))
    print(name, r, what)
    if r >= 0 or e not in (errno.EPERM, errno.ENOSYS):
        reached.append(f"{name}:{what}")
print("OPEN reached the kernel: " + " ".join(reached) if reached else f"HELD {len(sys.argv) - 1} calls refused")
