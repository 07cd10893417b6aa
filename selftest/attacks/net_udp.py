# Attack: send a UDP datagram to a public resolver. It must fail to send
# (ENETUNREACH, or EPERM where the policy refuses inet sockets): nothing is
# received, so the only thing to assert on is the error.
import socket, sys

host, port = sys.argv[1], int(sys.argv[2])
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.sendto(b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x01", (host, port))
except OSError as e:
    print(f"HELD sendto {host}:{port}: {e.__class__.__name__} errno {e.errno}")
else:
    print(f"OPEN sent a datagram to {host}:{port}")
