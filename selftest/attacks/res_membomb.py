# Attack: allocate and touch memory until something stops it, bounded at
# BOUND MiB. Held when the kernel OOM-kills the jail at its memory limit
# (then this never prints).
import sys

bound = int(sys.argv[1])
chunks = []
try:
    for i in range(bound // 8):
        chunks.append(bytearray(8 << 20))  # zero-filled: every page touched
except MemoryError:
    print(f"HELD MemoryError after {len(chunks) * 8} MiB")
    sys.exit(0)
print(f"OPEN allocated {len(chunks) * 8} MiB")
