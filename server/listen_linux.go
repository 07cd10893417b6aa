package server

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"

	"github.com/coreos/go-systemd/v22/activation"
	"golang.org/x/sys/unix"
)

// Listener is the server's socket and how to clean it up.
type Listener struct {
	net.Listener
	path      string // removed by Close when we made it
	activated bool   // handed over by systemd (LISTEN_FDS), which owns the file

	closeOnce sync.Once
	closeErr  error
}

// Activated reports whether systemd handed the socket over.
func (l *Listener) Activated() bool { return l.activated }

// Close stops listening and removes the socket file the server made,
// once: the HTTP server's shutdown closes the listener, and so does the
// command when Serve returns, after the grace period and the sweep. By
// then a new server may have made its own socket at the path, which a
// second removal would take from it.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() {
		l.closeErr = l.Listener.Close()
		if l.path != "" && !l.activated {
			if rerr := os.Remove(l.path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) && l.closeErr == nil {
				l.closeErr = rerr
			}
		}
	})
	return l.closeErr
}

// Listen returns the socket systemd passed (LISTEN_FDS; it must be one
// unix stream socket: the server never listens on TCP), or else makes one
// at path: mode 0660 from the moment it exists, owned by group when given.
// A socket file left by a server that died is replaced; one that a live
// server answers on is an error.
func Listen(path, group string) (*Listener, error) {
	lns, err := activation.Listeners()
	if err != nil {
		return nil, fmt.Errorf("systemd socket activation: %w", err)
	}
	if len(lns) > 0 {
		if len(lns) != 1 || lns[0] == nil {
			return nil, fmt.Errorf("systemd socket activation: want exactly one stream socket, got %d", len(lns))
		}
		ul, ok := lns[0].(*net.UnixListener)
		if !ok {
			lns[0].Close()
			return nil, fmt.Errorf("systemd socket activation: %s is not a unix socket; stockade serve listens on a unix socket only (ListenStream=/run/stockade/stockade.sock)", lns[0].Addr())
		}
		ul.SetUnlinkOnClose(false)
		return &Listener{Listener: ul, path: ul.Addr().String(), activated: true}, nil
	}
	if path == "" {
		return nil, errors.New("serve: no --socket given and no socket from systemd")
	}
	// The socket is bound under a short temporary name and renamed into
	// place, which works at any length; but a client connects by the
	// path, which must fit in sun_path with its NUL, or connect fails.
	if max := len(unix.RawSockaddrUnix{}.Path) - 1; len(path) > max {
		return nil, fmt.Errorf("socket %s: %d bytes, and a unix socket address holds at most %d (sun_path): no client could connect; choose a shorter --socket", path, len(path), max)
	}
	gid := -1
	if group != "" {
		g, err := user.LookupGroup(group)
		if err != nil {
			return nil, fmt.Errorf("--group %s: %w", group, err)
		}
		gid, _ = strconv.Atoi(g.Gid)
	}
	// As systemd's DirectoryMode does: /run/stockade is gone after a reboot.
	dir, base := filepath.Dir(path), filepath.Base(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("socket directory: %w", err)
	}
	dirfd, err := openSocketDir(dir)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dirfd)
	if err := removeStale(path); err != nil {
		return nil, err
	}
	// The socket is made under a temporary name, 0600 from bind on (the
	// umask), given its group and mode there through an O_PATH descriptor
	// (chmod by path follows a symlink; fchmod on the socket's own fd
	// changes the socket inode, not the file that connect checks), and
	// renamed into place: no moment at which others can connect, and no
	// path the server follows twice. The directory is checked above:
	// nobody but its owner can swap names in it.
	tmp := fmt.Sprintf(".%s.%d.tmp", base, os.Getpid())
	_ = unix.Unlinkat(dirfd, tmp, 0)
	via := fmt.Sprintf("/proc/self/fd/%d/%s", dirfd, tmp)
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", via)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	fail := func(err error) (*Listener, error) {
		ln.Close()
		_ = unix.Unlinkat(dirfd, tmp, 0)
		return nil, err
	}
	if err := setSocketMode(dirfd, tmp, gid); err != nil {
		return fail(fmt.Errorf("socket %s: %w", path, err))
	}
	if err := unix.Renameat(dirfd, tmp, dirfd, base); err != nil {
		return fail(fmt.Errorf("rename socket into place at %s: %w", path, err))
	}
	return &Listener{Listener: ln, path: path}, nil
}

// Addr is the socket's path (it was made under another name).
func (l *Listener) Addr() net.Addr {
	if l.activated {
		return l.Listener.Addr()
	}
	return &net.UnixAddr{Name: l.path, Net: "unix"}
}

// openSocketDir opens the socket's directory, refusing one that another
// user could change: whoever can write in it can replace the socket with
// their own (and read every caller's code) or plant a symlink for the
// server to chown and chmod.
func openSocketDir(dir string) (int, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("socket directory %s: %w", dir, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("socket directory %s: %w", dir, err)
	}
	if st.Uid != 0 && st.Uid != uint32(os.Getuid()) {
		unix.Close(fd)
		return -1, fmt.Errorf("socket directory %s is owned by uid %d: it must be owned by root or by the server's user (chown it, or choose another --socket)", dir, st.Uid)
	}
	if st.Mode&0o022 != 0 {
		unix.Close(fd)
		return -1, fmt.Errorf("socket directory %s is writable by group or others (mode %#o): others could replace the socket (chmod go-w it, or choose another --socket)", dir, st.Mode&0o7777)
	}
	return fd, nil
}

// setSocketMode gives the socket named name in dirfd its group and mode
// 0660, through an O_PATH descriptor that did not follow a symlink.
func setSocketMode(dirfd int, name string, gid int) error {
	fd, err := unix.Openat(dirfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return fmt.Errorf("%s is not the socket just made", name)
	}
	if gid >= 0 {
		if err := unix.Fchownat(fd, "", -1, gid, unix.AT_EMPTY_PATH); err != nil {
			return fmt.Errorf("chown to gid %d: %w", gid, err)
		}
	}
	// fchmod refuses an O_PATH descriptor; its /proc link names the inode.
	if err := unix.Chmod(fmt.Sprintf("/proc/self/fd/%d", fd), 0o660); err != nil {
		return fmt.Errorf("chmod: %w", err)
	}
	return nil
}

// removeStale removes a socket file nobody answers on.
func removeStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("socket %s: %w", path, err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("socket %s: exists and is not a socket; remove it or choose another path", path)
	}
	c, err := net.Dial("unix", path)
	if err == nil {
		c.Close()
		return fmt.Errorf("socket %s: another server is listening on it", path)
	}
	if !errors.Is(err, unix.ECONNREFUSED) {
		return fmt.Errorf("socket %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("remove stale socket %s: %w", path, err)
	}
	return nil
}
