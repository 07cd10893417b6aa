# Attack: ask the jail's egress proxy (HTTPS_PROXY) for each TARGET with a
# CONNECT: allowlisted names that resolve to the host's loopback, the cloud
# metadata address or a private range, IP literals, a NUL in the name.
# Held when the proxy refuses every one (its status line is not 200).
import os, socket, sys
from urllib.parse import urlsplit

proxy = urlsplit(os.environ.get("HTTPS_PROXY", ""))
if not proxy.hostname:
    print("OPEN no HTTPS_PROXY in an allowlisted jail")
    sys.exit(0)
opened = []
for target in sys.argv[1:]:
    t = target.replace("\\0", "\0").encode("latin-1")
    try:
        s = socket.create_connection((proxy.hostname, proxy.port), timeout=10)
        s.sendall(b"CONNECT " + t + b" HTTP/1.1\r\nHost: " + t + b"\r\n\r\n")
        line = s.makefile("rb").readline().decode("latin-1").strip()
        s.close()
    except OSError as e:
        line = f"error {e}"
    if " 200 " in line + " ":
        opened.append(f"{target!r}: {line}")
if opened:
    print("OPEN the proxy opened " + "; ".join(opened))
else:
    print(f"HELD the proxy refused all {len(sys.argv) - 1} targets")
