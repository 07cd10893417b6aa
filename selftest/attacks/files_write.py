# Attack: write where the jail must not. A path ending in / is a directory
# to create a file in; any other path is opened for writing (never written:
# opening /proc/sys/vm/drop_caches or release_agent for writing is the door).
import glob, os, sys

opened = []
for pattern in sys.argv[1:]:
    paths = sorted(glob.glob(pattern)) or [pattern]
    for p in paths:
        try:
            if p.endswith("/"):
                name = os.path.join(p, ".stockade-selftest-%d" % os.getpid())
                fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                os.close(fd)
                os.unlink(name)
            else:
                os.close(os.open(p, os.O_WRONLY))
            opened.append(p)
            print(p, "WRITABLE")
        except OSError as e:
            print(p, e.__class__.__name__, e.errno)
print("OPEN writable: " + " ".join(opened) if opened else "HELD no path writable")
