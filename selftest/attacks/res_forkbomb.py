# Attack: a fork bomb, bounded at BOUND children so that an open door cannot
# take the host down. Held when fork fails at the pids limit and the run is
# reported as "pids".
import os, sys, time

bound = int(sys.argv[1])
n = 0
try:
    while n < bound:
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
        n += 1
except OSError as e:
    print(f"HELD fork failed after {n} children: errno {e.errno}")
    sys.exit(0)
print(f"OPEN forked {n} children")
