# Attack: open raw and packet sockets, which forge packets and sniff links.
import socket

opened = []
for name, fam, typ, proto in [
    ("AF_INET SOCK_RAW", socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP),
    ("AF_INET6 SOCK_RAW", socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6),
    ("AF_PACKET SOCK_RAW", socket.AF_PACKET, socket.SOCK_RAW, 0x0300),
    ("AF_PACKET SOCK_DGRAM", socket.AF_PACKET, socket.SOCK_DGRAM, 0x0300),
]:
    try:
        socket.socket(fam, typ, proto).close()
        opened.append(name)
        print(name, "opened")
    except OSError as e:
        print(name, e.__class__.__name__, e.errno)
print("OPEN " + ", ".join(opened) if opened else "HELD raw and packet sockets refused")
