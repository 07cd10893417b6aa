# Attack: fill /work five ways, each from an empty start: write, fallocate
# (one huge reservation, then 4 MiB at a time), a flood of empty files,
# hard links to one file, and sparse files with one byte per page. Files
# stay under 60 MiB so that the file-size rlimit is not what stops it; each
# way is bounded at BOUND MiB, or FILES files and links. Held when every way
# ends in ENOSPC (or /work is read-only). Everything happens in a directory
# of its own, removed at the end: /work may be the user's --workdir. Each way
# stays full a moment, long enough for stockade (which looks every 50 ms) to
# see it and say "disk".
import errno, os, sys, time

MiB = 1 << 20
D = "/work/stockade-selftest-fill"


def clear():
    time.sleep(0.12)
    for name in os.listdir(D):
        os.unlink(D + "/" + name)


def until_full(step, bound):
    n = 0
    try:
        while n < bound:
            step(n)
            n += 1
    except OSError as e:
        return n, e.errno
    return n, None


def write_file(n):
    fd = os.open(D + f"/w{n}", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for _ in range(4):
            os.write(fd, b"\xa5" * MiB)
    finally:
        os.close(fd)


def falloc_file(n):
    fd = os.open(D + f"/f{n}", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        os.posix_fallocate(fd, 0, 4 * MiB)
    finally:
        os.close(fd)


def sparse_file(n):
    fd = os.open(D + f"/s{n}", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        os.ftruncate(fd, 60 * MiB)
        for off in range(0, 60 * MiB, 4096):
            os.pwrite(fd, b"x", off)
    finally:
        os.close(fd)


report = []
try:
    os.mkdir(D)
    n, err = until_full(write_file, int(sys.argv[1]) // 4)
    report.append(("write", f"{4 * n}M", err))
    clear()
    fd = os.open(D + "/huge", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        os.posix_fallocate(fd, 0, 30 << 30)
        report.append(("fallocate 30G", "reserved", None))
    except OSError as e:
        report.append(("fallocate 30G", "refused", e.errno))
    os.close(fd)
    n, err = until_full(falloc_file, int(sys.argv[1]) // 4)
    report.append(("fallocate", f"{4 * n}M", err))
    clear()
    n, err = until_full(lambda i: os.close(os.open(D + f"/e{i}", os.O_WRONLY | os.O_CREAT, 0o600)), int(sys.argv[2]))
    report.append(("files", str(n), err))
    clear()
    open(D + "/target", "w").close()
    n, err = until_full(lambda i: os.link(D + "/target", D + f"/l{i}"), int(sys.argv[2]))
    report.append(("links", str(n), err))
    clear()
    n, err = until_full(sparse_file, int(sys.argv[1]) // 15)
    report.append(("sparse", f"{n} files", err))
    clear()
    os.rmdir(D)
except OSError as e:
    if e.errno in (errno.EROFS, errno.EACCES):
        print(f"HELD /work is not writable ({errno.errorcode[e.errno]})")
        sys.exit(0)
    raise

text = ", ".join(f"{what} {amount} {errno.errorcode.get(err, 'no error')}" for what, amount, err in report)
# EFBIG: the file-size rlimit refused the 30 GiB reservation first.
held = all(err == errno.ENOSPC or (what == "fallocate 30G" and err == errno.EFBIG) for what, _, err in report)
print(("HELD " if held else "OPEN ") + text)
