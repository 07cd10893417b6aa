# Attack: hold TCP socket buffers on the jail's own loopback, outside what
# a memory limit sees unless the kernel charges them: 64 connections whose
# receivers never read, each sender writing until the kernel refuses more,
# bounded at BOUND MiB. Held when the kernel took no more than LIMIT MiB.
import socket, sys, time

bound, limit = int(sys.argv[1]) << 20, int(sys.argv[2]) << 20
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(128)
conns, held = [], 0
for _ in range(64):
    c = socket.create_connection(srv.getsockname())
    a, _ = srv.accept()
    c.setblocking(False)
    conns.append((c, a))
for _ in range(20):
    grew = 0
    for c, _ in conns:
        try:
            while held < bound:
                n = c.send(b"x" * 65536)
                held += n
                grew += n
        except OSError:
            pass
    if not grew or held >= bound:
        break
    time.sleep(0.05)
verdict = "HELD" if held <= limit else "OPEN"
print(f"{verdict} the kernel took {held >> 20} MiB of socket buffers under a {limit >> 20} MiB memory limit")
