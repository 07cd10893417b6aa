package server

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/coreos/go-systemd/v22/activation"
	"golang.org/x/sys/unix"
)

// Listener is the server's socket and how to clean it up.
type Listener struct {
	net.Listener
	path      string // removed by Close when we made it
	activated bool   // handed over by systemd (LISTEN_FDS), which owns the file
}

// Activated reports whether systemd handed the socket over.
func (l *Listener) Activated() bool { return l.activated }

// Close stops listening and removes the socket file the server made.
func (l *Listener) Close() error {
	err := l.Listener.Close()
	if l.path != "" && !l.activated {
		if rerr := os.Remove(l.path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) && err == nil {
			err = rerr
		}
	}
	return err
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
	gid := -1
	if group != "" {
		g, err := user.LookupGroup(group)
		if err != nil {
			return nil, fmt.Errorf("--group %s: %w", group, err)
		}
		gid, _ = strconv.Atoi(g.Gid)
	}
	// As systemd's DirectoryMode does: /run/stockade is gone after a reboot.
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("socket directory: %w", err)
	}
	if err := removeStale(path); err != nil {
		return nil, err
	}
	// The umask makes the socket 0600 at bind, before chmod opens it to the
	// group: there is no moment at which others can connect.
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	l := &Listener{Listener: ln, path: path}
	if gid >= 0 {
		if err := os.Lchown(path, -1, gid); err != nil {
			l.Close()
			return nil, fmt.Errorf("chown %s to group %s: %w", path, group, err)
		}
	}
	if err := os.Chmod(path, 0o660); err != nil {
		l.Close()
		return nil, fmt.Errorf("chmod %s: %w", path, err)
	}
	return l, nil
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
