# Attack: find a network interface other than lo to leave through.
import os, socket

names = set()
try:
    names.update(n for _, n in socket.if_nameindex())
except OSError as e:
    print("if_nameindex:", e)
with open("/proc/net/dev") as f:
    for line in f.readlines()[2:]:
        names.add(line.split(":")[0].strip())
if os.path.isdir("/sys/class/net"):
    names.update(os.listdir("/sys/class/net"))
other = sorted(names - {"lo"})
print("interfaces:", sorted(names))
if other:
    print("OPEN interfaces besides lo:", " ".join(other))
else:
    print("HELD only lo")
