# Attack: flood stdout with BYTES bytes (many times the output limit).
# Held when stockade keeps no more than the limit and says "output".
import os, sys

left = int(sys.argv[1])
chunk = b"A" * 65536
while left > 0:
    n = os.write(1, chunk[:left])
    left -= n
