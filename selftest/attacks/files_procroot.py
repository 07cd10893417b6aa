# Attack: reach the host's root through /proc: the root and cwd links of
# init and of the caller, and .. walks above them, to a host file.
import os, sys

canary = sys.argv[1]
found = []
for p in ["/proc/1/root" + canary, "/proc/1/cwd/../../../.." + canary,
          "/proc/self/root" + canary, "/proc/self/root/../../.." + canary,
          "/proc/1/root/etc/shadow", "/proc/self/root/../etc/shadow",
          "/proc/self/cwd/../../../etc/shadow"]:
    try:
        with open(p, "rb") as f:
            data = f.read(256)
        found.append(p)
        print(p, "read:", data[:64])
    except OSError as e:
        print(p, e.__class__.__name__, e.errno)
try:
    ents = os.listdir("/proc/1/root/")
    print("/proc/1/root lists", sorted(ents))
except OSError as e:
    print("/proc/1/root/", e.__class__.__name__)
print("OPEN read " + " ".join(found) if found else "HELD no host file through /proc")
