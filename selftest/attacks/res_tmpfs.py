# Attack: fill the jail's /tmp (host memory) until it is full, in files of
# 4 MiB so that the file-size rlimit is not what stops it, bounded at BOUND
# MiB. Held when a write fails with ENOSPC and the run still ends normally.
import errno, os, sys

bound = int(sys.argv[1])
block = b"\xa5" * (1 << 20)
written = 0
try:
    while written < bound:
        with open(f"/tmp/fill-{written}", "wb") as f:
            for _ in range(4):
                f.write(block)
                f.flush()
                written += 1
except OSError as e:
    name = errno.errorcode.get(e.errno, str(e.errno))
    verdict = "HELD" if e.errno == errno.ENOSPC else "OPEN"
    print(f"{verdict} {name} after {written} MiB")
    sys.exit(0)
print(f"OPEN wrote {written} MiB into /tmp")
