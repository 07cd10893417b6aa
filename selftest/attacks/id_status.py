# Attack: look for privilege left in /proc/self/status. Arguments are
# FIELD=WANT pairs (CapEff=0000000000000000, NoNewPrivs=1, Seccomp=2).
import sys

status = {}
with open("/proc/self/status") as f:
    for line in f:
        k, _, v = line.partition(":")
        status[k] = v.strip()
bad = []
for arg in sys.argv[1:]:
    k, want = arg.split("=")
    got = status.get(k, "missing")
    print(k, got)
    if got != want:
        bad.append(f"{k} {got} (want {want})")
print("OPEN " + ", ".join(bad) if bad else "HELD " + ", ".join(a.replace("=", " ") for a in sys.argv[1:]))
