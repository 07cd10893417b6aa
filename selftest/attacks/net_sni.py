# Attack: through the egress proxy (HTTPS_PROXY), open a CONNECT tunnel to
# an allowed TARGET and send a TLS ClientHello that names no server, an
# empty one, or one that is not a DNS name: the dialled address would serve
# whatever it serves by default (domain fronting without a name). Held when
# the proxy closes each tunnel at its ClientHello, before any byte crosses.
import os, socket, struct, sys
from urllib.parse import urlsplit

def hello(name):
    body = b"\x03\x03" + bytes(32) + b"\x00" + b"\x00\x02\x13\x01" + b"\x01\x00"
    exts = b"\x00\x0b\x00\x02\x01\x00"
    if name is not None:
        entry = b"\x00" + struct.pack(">H", len(name)) + name
        lst = struct.pack(">H", len(entry)) + entry
        exts += b"\x00\x00" + struct.pack(">H", len(lst)) + lst
    body += struct.pack(">H", len(exts)) + exts
    hs = b"\x01" + len(body).to_bytes(3, "big") + body
    return b"\x16\x03\x01" + struct.pack(">H", len(hs)) + hs

proxy = urlsplit(os.environ.get("HTTPS_PROXY", ""))
if not proxy.hostname:
    print("OPEN no HTTPS_PROXY in an allowlisted jail")
    sys.exit(0)
target = sys.argv[1].encode()
opened, errors = [], []
for label, name in [("no server name", None), ("an empty server name", b""), ("an invalid server name", b"exa mple\x00.evil")]:
    s = socket.create_connection((proxy.hostname, proxy.port), timeout=10)
    s.sendall(b"CONNECT " + target + b" HTTP/1.1\r\nHost: " + target + b"\r\n\r\n")
    f = s.makefile("rb")
    line = f.readline().decode("latin-1").strip()
    if " 200 " not in line + " ":
        errors.append(f"{label}: the proxy answered {line!r}, not 200: the tunnel never reached its SNI check")
        s.close()
        continue
    while f.readline() not in (b"\r\n", b"\n", b""):
        pass
    s.sendall(hello(name))
    s.settimeout(3)
    try:
        closed = s.recv(1) == b""
    except socket.timeout:
        closed = False
    except OSError:
        closed = True
    s.close()
    if not closed:
        opened.append(label)
if opened:
    print("OPEN the proxy kept a tunnel open for a ClientHello with " + ", ".join(opened))
elif errors:
    print("ERROR " + "; ".join(errors))
else:
    print("HELD the proxy closed all 3 tunnels at their ClientHello")
