# Attack: spin the CPU, bounded at SECONDS. Held when the short timeout
# ends the run (then this never prints).
import sys, time

end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    pass
print(f"OPEN spun for {sys.argv[1]}s")
