# Attack: a thread bomb, bounded at BOUND threads. Held when thread
# creation fails at the pids limit (threads are tasks too).
import sys, threading, time

bound = int(sys.argv[1])
n = 0
try:
    while n < bound:
        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
        n += 1
except (OSError, RuntimeError) as e:
    print(f"HELD thread start failed after {n} threads: {e}")
    sys.exit(0)
print(f"OPEN started {n} threads")
