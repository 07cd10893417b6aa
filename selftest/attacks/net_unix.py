# Attack: connect to a unix socket the host listens on, by abstract name
# (@name: abstract names belong to the network namespace) or by path.
import socket, sys

addr = sys.argv[1]
target = "\0" + addr[1:] if addr.startswith("@") else addr
try:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(3)
    s.connect(target)
except OSError as e:
    print(f"HELD connect {addr}: {e.__class__.__name__} errno {e.errno}")
else:
    print(f"OPEN connected to {addr}")
