# Attack: drop a binary into a writable directory and run it (how a
# downloaded or generated payload would start).
import os, shutil, subprocess, sys

d = sys.argv[1]
dst = os.path.join(d, "stockade-selftest-true")
try:
    shutil.copy("/bin/true", dst)
    os.chmod(dst, 0o755)
except OSError as e:
    print(f"HELD cannot even write {d}: {e.__class__.__name__} errno {e.errno}")
    sys.exit(0)
try:
    subprocess.run([dst], check=True)
except OSError as e:
    print(f"HELD exec from {d}: {e.__class__.__name__} errno {e.errno}")
else:
    print(f"OPEN executed {dst}")
