# Attack: read host files and list host directories from inside the jail.
# A file is a door when its bytes can be read, a directory when it lists
# anything, a socket when it exists at all.
import os, stat, sys

found = []
for p in sys.argv[1:]:
    try:
        st = os.stat(p)
    except OSError as e:
        print(p, "absent:", e.__class__.__name__)
        continue
    try:
        if stat.S_ISDIR(st.st_mode):
            ents = os.listdir(p)
            print(p, "lists", len(ents), "entries")
            if ents:
                found.append(f"{p} lists {sorted(ents)[:3]}")
        elif stat.S_ISSOCK(st.st_mode):
            found.append(f"{p} is a socket")
        else:
            with open(p, "rb") as f:
                data = f.read(256)
            print(p, "read:", data[:64])
            found.append(f"{p} read {len(data)} bytes")
    except OSError as e:
        print(p, "exists but", e.__class__.__name__)
print("OPEN " + "; ".join(found) if found else "HELD none of %d paths readable" % (len(sys.argv) - 1))
