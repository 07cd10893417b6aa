# Attack: open a disk: a block device node in /dev, /dev/mem and friends,
# or one made with mknod in /tmp.
import os, stat

opened = []
for d in ["/dev"]:
    for name in sorted(os.listdir(d)):
        p = os.path.join(d, name)
        try:
            if stat.S_ISBLK(os.lstat(p).st_mode):
                opened.append(p + " (block node present)")
        except OSError:
            pass
for p in ["/dev/sda", "/dev/vda", "/dev/nvme0n1", "/dev/xvda", "/dev/mem", "/dev/kmem", "/dev/port", "/dev/kmsg"]:
    try:
        os.close(os.open(p, os.O_RDONLY))
        opened.append(p)
    except OSError as e:
        print(p, e.__class__.__name__, e.errno)
for name, major, minor in [("sda", 8, 0), ("vda", 253, 0)]:
    node = "/tmp/" + name
    try:
        os.mknod(node, stat.S_IFBLK | 0o600, os.makedev(major, minor))
    except OSError as e:
        print("mknod", node, e.__class__.__name__, e.errno)
        continue
    try:
        os.close(os.open(node, os.O_RDONLY))
        opened.append(node + " (mknod)")
    except OSError as e:
        print("open", node, e.__class__.__name__, e.errno)
print("OPEN " + " ".join(opened) if opened else "HELD no block device reachable")
