package jail

import (
	"fmt"
	"github.com/stockade/stockade/jail/internal/initproc"
	"os"
	"os/user"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// runtimeSockets are the control sockets of container runtimes: a jail that
// can reach one of them is root on the host.
var runtimeSockets = []string{
	"/run/docker.sock", "/var/run/docker.sock", "/run/containerd/containerd.sock",
	"/run/crio/crio.sock", "/run/podman/podman.sock", "/run/buildkit/buildkitd.sock",
	"/var/lib/kubelet", "/run/user",
}

// checkWorkdir refuses the directories that must never become a writable
// /work: the root, a home directory or anything containing one, and
// anything containing a container runtime's socket. The path is opened
// without following symlinks, and the checks run on the path as given,
// which is therefore the real one.
func checkWorkdir(dir string) (unix.Stat_t, error) {
	var st unix.Stat_t
	clean := filepath.Clean(dir)
	if clean == "/" {
		return st, fmt.Errorf("--workdir /: refusing to hand the whole filesystem to the jail")
	}
	for _, home := range homeDirs() {
		if within(home, clean) {
			return st, fmt.Errorf("--workdir %s: refusing a home directory or a directory containing one (%s); make a dedicated directory", dir, home)
		}
	}
	// Runtime state (/run, /var/run: user runtime dirs with systemd's and
	// D-Bus's sockets, container runtimes) is never a place for a jail.
	for _, run := range []string{"/run", "/var/run", os.Getenv("XDG_RUNTIME_DIR")} {
		if run != "" && within(clean, run) {
			return st, fmt.Errorf("--workdir %s: refusing runtime state below %s (user and service sockets live there)", dir, run)
		}
	}
	for _, sock := range runtimeSockets {
		if within(sock, clean) {
			if _, err := os.Lstat(sock); err == nil {
				return st, fmt.Errorf("--workdir %s: it contains %s, a container runtime socket", dir, sock)
			}
		}
	}
	fd, err := initproc.OpenNoSymlinks(clean)
	if err != nil {
		return st, fmt.Errorf("--workdir %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Fstat(fd, &st); err != nil {
		return st, fmt.Errorf("--workdir %s: %w", dir, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return st, fmt.Errorf("--workdir %s: not a directory", dir)
	}
	return st, nil
}

// within reports whether p is dir or lies below it.
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

func homeDirs() []string {
	homes := []string{"/root", "/home"}
	if h := os.Getenv("HOME"); h != "" && h != "/" {
		homes = append(homes, filepath.Clean(h))
	}
	if u, err := user.Current(); err == nil && u.HomeDir != "" && u.HomeDir != "/" {
		homes = append(homes, filepath.Clean(u.HomeDir))
	}
	return homes
}
