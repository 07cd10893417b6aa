# Attack: use a descriptor the caller of stockade left open without
# close-on-exec (a shell's exec 7</, a journal stream, a lock file). The
# host holds one on a directory and one appending to a file while this jail
# starts. Every descriptor beyond 0-2 is a door: it is named, written to
# and, if it is a directory, listed. The host checks its file too.
import os

held = []
for n in sorted(os.listdir("/proc/self/fd"), key=int):
    fd = int(n)
    if fd <= 2:
        continue
    try:
        target = os.readlink("/proc/self/fd/%d" % fd)
    except OSError:
        continue  # the listing's own descriptor, closed by now
    held.append("fd %d -> %s" % (fd, target))
    try:
        os.write(fd, b"stockade-selftest: written from the jail\n")
        held.append("wrote fd %d" % fd)
    except OSError:
        pass
    try:
        held.append("listed fd %d: %s" % (fd, sorted(os.listdir(fd))[:4]))
    except OSError:
        pass
print("OPEN " + "; ".join(held) if held else "HELD the jail holds only 0-2")
