package jailinit

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// openProxyListener binds the egress proxy's listening sockets on the
// jail's loopback and sends them to the parent, which serves them from the
// host side. The jail's namespace keeps its one interface and no route:
// the only way out is a connection the parent accepts on these sockets.
// They are made here, in the jail's namespace, because a socket belongs to
// the namespace it was created in; init closes its copies at once (and they
// are close-on-exec), so the payload never holds them, and since nothing
// sets SO_REUSEADDR or SO_REUSEPORT the payload cannot bind the same port
// to impersonate the proxy.
func openProxyListener(c *Config) error {
	if c.ProxyPort == 0 {
		return nil
	}
	v4, err := listenOn(unix.AF_INET, &unix.SockaddrInet4{Port: int(c.ProxyPort), Addr: [4]byte{127, 0, 0, 1}})
	if err != nil {
		return fmt.Errorf("listen on 127.0.0.1:%d: %w", c.ProxyPort, err)
	}
	defer unix.Close(v4)
	fds := []int{v4}
	v6, err := listenOn(unix.AF_INET6, &unix.SockaddrInet6{Port: int(c.ProxyPort), Addr: [16]byte{15: 1}})
	switch {
	case err == nil:
		defer unix.Close(v6)
		fds = append(fds, v6)
	case errors.Is(err, unix.EAFNOSUPPORT), errors.Is(err, unix.EADDRNOTAVAIL):
		// IPv6 is off on this host: the proxy variables name 127.0.0.1.
	default:
		return fmt.Errorf("listen on [::1]:%d: %w", c.ProxyPort, err)
	}
	return unix.Sendmsg(ctlFD, []byte(`{"t":"proxy"}`), unix.UnixRights(fds...), nil, 0)
}

func listenOn(family int, sa unix.Sockaddr) (int, error) {
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if family == unix.AF_INET6 {
		// [::1] only; 127.0.0.1 has its own socket.
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1); err != nil {
			unix.Close(fd)
			return -1, err
		}
	}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if err := unix.Listen(fd, 128); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}
