# Attack: gain root through a setuid-root binary (su, passwd, ...): run each
# one found and see whether it ever runs as root.
import os, stat, subprocess

bins = []
for d in ["/usr/bin", "/usr/sbin", "/bin", "/sbin", "/usr/lib/dbus-1.0", "/usr/lib/openssh"]:
    try:
        names = os.listdir(d)
    except OSError:
        continue
    for n in names:
        p = os.path.join(d, n)
        try:
            st = os.stat(p)
        except OSError:
            continue
        if st.st_mode & stat.S_ISUID and stat.S_ISREG(st.st_mode):
            bins.append(p)
print("setuid binaries:", sorted(set(bins)))
nosuid = bool(os.statvfs("/usr/bin").f_flag & os.ST_NOSUID)
print("/usr/bin mounted nosuid:", nosuid)
rooted = []
# su runs id as the target user only after it has become root; passwd -S
# prints another user's status only as root.
for argv in [["su", "-c", "id -u", "root"], ["su", "root", "-s", "/usr/bin/id"], ["passwd", "-S", "root"]]:
    try:
        r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired) as e:
        print(argv[0], e.__class__.__name__)
        continue
    out = r.stdout.decode(errors="replace").strip()
    print(argv, "exit", r.returncode, repr(out), repr(r.stderr.decode(errors="replace").strip()[:80]))
    if r.returncode == 0 and (out == "0" or out.startswith("uid=0") or out.startswith("root ")):
        rooted.append(" ".join(argv))
if rooted:
    print("OPEN ran as root: " + "; ".join(rooted))
else:
    print(f"HELD {len(set(bins))} setuid binaries, none elevated (nosuid {nosuid})")
