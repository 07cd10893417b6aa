# Attack: leave a set-id binary in /work, which is a directory on the host
# where the jail's nosuid mount does not hold: any local user running it
# would become the jail's host uid (the --workdir owner's).
import os, shutil, sys

d = sys.argv[1]
dst = os.path.join(d, "stockade-selftest-setid")
try:
    shutil.copy("/usr/bin/id", dst)
except OSError as e:
    print(f"HELD cannot even write {d}: {e.__class__.__name__} errno {e.errno}")
    sys.exit(0)
opened = []
for mode in (0o4755, 0o2755):
    try:
        os.chmod(dst, mode)
    except OSError:
        pass
    if os.stat(dst).st_mode & mode & 0o6000:
        opened.append(oct(mode))
try:
    os.close(os.open(dst + "-created", os.O_CREAT | os.O_WRONLY, 0o6755))
    if os.stat(dst + "-created").st_mode & 0o6000:
        opened.append("open(O_CREAT, 06755)")
except OSError:
    pass
if opened:
    print("OPEN set-id bits kept: " + ", ".join(opened))
else:
    print("HELD no set-id bit can be set in " + d)
