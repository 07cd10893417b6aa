# Attack: be root inside: check the ids, then ask for uid 0 and gid 0.
import os

ids = os.getresuid() + os.getresgid()
print("resuid+resgid", ids)
got = []
if 0 in ids:
    got.append("already id 0")
for name, call in [("setuid(0)", lambda: os.setuid(0)), ("setgid(0)", lambda: os.setgid(0)),
                   ("setresuid(0,0,0)", lambda: os.setresuid(0, 0, 0))]:
    try:
        call()
        got.append(name)
    except OSError as e:
        print(name, e.__class__.__name__, e.errno)
print("OPEN " + " ".join(got) if got else f"HELD uid {os.getuid()}, setuid(0) refused")
