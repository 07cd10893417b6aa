# Attack: open a TCP connection out of the jail to HOST:PORT (the host's
# loopback listener, the cloud metadata address, the default gateway).
# Held when the connect fails; the jail's network namespace has only lo.
import socket, sys

host, port = sys.argv[1], int(sys.argv[2])
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(3)
    s.connect((host, port))
except OSError as e:
    print(f"HELD connect {host}:{port}: {e.__class__.__name__} errno {e.errno}")
else:
    print(f"OPEN connected to {host}:{port}")
