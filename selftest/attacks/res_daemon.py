# Attack: leave a daemon behind. Double-fork, leave the session, ignore
# SIGTERM and SIGHUP, and exit at once; the daemon carries MARKER in its
# command line so that the host can look for it after the run.
import os, signal, sys, time

marker = sys.argv[1]
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(3600)", marker])
    os._exit(0)
os.wait()
time.sleep(0.2)
print("HELD? daemon started; the host checks that it is gone")
