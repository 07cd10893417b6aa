# Attack: be swept while alive. Another stockade's start (and a server's
# shutdown sweep) removes what dead stockades left; it must never take this
# live run's cgroup, run directory or /work for such a leftover. Write
# /work/data, say "up", wait until the suite's sibling runs and sweep are
# done (it closes this program's stdin then), and check /work.
import os, sys

data = os.urandom(1 << 20)
with open("/work/data", "wb") as f:
    f.write(data)
print("up", flush=True)
sys.stdin.read()
try:
    same = open("/work/data", "rb").read() == data
except OSError as e:
    print("OPEN /work/data unreadable after the siblings' sweeps:", e)
    sys.exit(0)
print("HELD /work intact, the run alive through 3 sibling runs and a sweep" if same else "OPEN /work/data changed")
