# Attack: find a secret the caller had in its environment, in the jail's
# environment or in init's.
import os, sys

name, secret = sys.argv[1], sys.argv[2].encode()
found = []
if name in os.environ:
    found.append("os.environ")
for p in ["/proc/self/environ", "/proc/1/environ", "/proc/1/cmdline"]:
    try:
        with open(p, "rb") as f:
            if secret in f.read():
                found.append(p)
    except OSError as e:
        print(p, e.__class__.__name__)
print("OPEN caller's secret in " + " ".join(found) if found else f"HELD {name} absent")
