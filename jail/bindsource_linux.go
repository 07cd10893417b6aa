package jail

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/stockade/stockade/internal/hostenv"
	"github.com/stockade/stockade/internal/runlock"
	"github.com/stockade/stockade/jail/internal/jailinit"
	"golang.org/x/sys/unix"
)

// runtimeSockets are the control sockets of container runtimes: a jail that
// can reach one of them is root on the host.
var runtimeSockets = []string{
	"/run/docker.sock", "/var/run/docker.sock", "/run/containerd/containerd.sock",
	"/run/crio/crio.sock", "/run/podman/podman.sock", "/run/buildkit/buildkitd.sock",
	"/var/lib/kubelet", "/run/user",
}

// sourcePolicy is what the host says about where a bind may come from.
// One set of refusals holds for every host path a jail gets (--workdir,
// --ro, the python FILE, --rootfs): a read-only bind of the wrong place
// leaks as much as a writable one, and sockets below it reach services.
type sourcePolicy struct {
	homes   []string // every home directory in /etc/passwd, /root, /home, the caller's
	runtime []string // runtime state: /run, /var/run, $XDG_RUNTIME_DIR
	// own is stockade's own state: the run base (every run's directory),
	// the lock directory and the uid lock directory, wherever
	// $STOCKADE_LOCK_DIR, $TMPDIR or $XDG_RUNTIME_DIR put them.
	own    []string
	uidMin uint32 // the first uid of a login account (login.defs UID_MIN)
	names  map[uint32]string
	// read is set by hostSourcePolicy: a policy nobody read from the host
	// (the zero value) refuses every source rather than allow them all.
	read bool
}

// hostSourcePolicy reads the policy from this host: /etc/passwd (every
// entry, system accounts included: postgres's home is /var/lib/postgresql,
// www-data's /var/www) and /etc/login.defs.
func hostSourcePolicy() sourcePolicy {
	p := sourcePolicy{homes: []string{"/root", "/home"}, uidMin: 1000, names: map[uint32]string{}, read: true}
	if b, err := os.ReadFile("/etc/passwd"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Split(line, ":")
			if len(f) < 7 || strings.HasPrefix(f[0], "#") {
				continue
			}
			if uid, err := strconv.ParseUint(f[2], 10, 32); err == nil {
				p.names[uint32(uid)] = f[0]
			}
			if h := filepath.Clean(f[5]); filepath.IsAbs(h) && h != "/" {
				p.homes = append(p.homes, h)
			}
		}
	}
	if h := os.Getenv("HOME"); filepath.IsAbs(h) && filepath.Clean(h) != "/" {
		p.homes = append(p.homes, filepath.Clean(h))
	}
	if u, err := user.Current(); err == nil && filepath.IsAbs(u.HomeDir) && filepath.Clean(u.HomeDir) != "/" {
		p.homes = append(p.homes, filepath.Clean(u.HomeDir))
	}
	for _, r := range []string{"/run", "/var/run", os.Getenv("XDG_RUNTIME_DIR")} {
		if filepath.IsAbs(r) && filepath.Clean(r) != "/" {
			p.runtime = append(p.runtime, filepath.Clean(r))
		}
	}
	p.own = ownState()
	if b, err := os.ReadFile("/etc/login.defs"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 2 && f[0] == "UID_MIN" {
				if v, err := strconv.ParseUint(f[1], 10, 32); err == nil && v > 0 {
					p.uidMin = uint32(v)
				}
			}
		}
	}
	return p
}

// checkPath refuses, by name alone, the host paths no bind may come from:
// the root, a home directory or anything containing one, runtime state and
// anything containing it, and anything containing a container runtime
// socket. flag names the source in the message. The path is the one that
// will be opened without following symlinks, so it is the real one.
func (p sourcePolicy) checkPath(flag, src string) error {
	clean := filepath.Clean(src)
	if clean == "/" {
		return fmt.Errorf("%s /: refusing to hand the host's whole filesystem to the jail", flag)
	}
	for _, home := range p.homes {
		if within(home, clean) {
			return fmt.Errorf("%s %s: refusing a home directory or a directory containing one (%s); make a dedicated directory", flag, src, home)
		}
	}
	// Runtime state (user runtime dirs with systemd's and D-Bus's sockets,
	// container runtimes) is never a place for a jail: a unix socket there
	// answers a jail as it answers the host.
	for _, run := range p.runtime {
		if within(clean, run) || within(run, clean) {
			return fmt.Errorf("%s %s: refusing runtime state %s (user and service sockets live there)", flag, src, run)
		}
	}
	// A jail that can list the run base sees every run's directory, and
	// one running as a neighbour's uid (a misconfiguration, or a stockade
	// of an older version) could enter it; the lock records name every
	// run's paths. None of it, nor any directory holding it, is a jail's.
	for _, own := range p.own {
		if within(clean, own) || within(own, clean) {
			return fmt.Errorf("%s %s: refusing stockade's own state %s (run directories and locks of every run) or a directory containing it", flag, src, own)
		}
	}
	for _, sock := range runtimeSockets {
		if within(sock, clean) {
			if _, err := os.Lstat(sock); err == nil {
				return fmt.Errorf("%s %s: it contains %s, a container runtime socket", flag, src, sock)
			}
		}
	}
	return nil
}

// checkSource is checkPath plus what only the file itself can say: it
// opens src without following symlinks and refuses the host's root under
// another name (a bind mount of / elsewhere). It returns src's stat.
func (p sourcePolicy) checkSource(flag, src string) (unix.Stat_t, error) {
	var st unix.Stat_t
	if !p.read {
		return st, fmt.Errorf("%s %s: the host's bind-source policy was not read (a stockade bug); refusing", flag, src)
	}
	if err := p.checkPath(flag, src); err != nil {
		return st, err
	}
	fd, err := jailinit.OpenNoSymlinks(filepath.Clean(src))
	if err != nil {
		return st, fmt.Errorf("%s %w", flag, err)
	}
	defer unix.Close(fd)
	if err := unix.Fstat(fd, &st); err != nil {
		return st, fmt.Errorf("%s %s: %w", flag, src, err)
	}
	var root unix.Stat_t
	if err := unix.Stat("/", &root); err != nil {
		return st, fmt.Errorf("stat /: %w", err)
	}
	if st.Dev == root.Dev && st.Ino == root.Ino {
		return st, fmt.Errorf("%s %s: it is the host's root directory under another name", flag, src)
	}
	return st, nil
}

// checkOwner refuses a --workdir the jail would write as someone who must
// not be impersonated: root, and system accounts (a service's data, such
// as /var/lib/postgresql, owned by postgres). Only as root: a normal user's
// jail acts as that user, whoever owns the directory.
func (p sourcePolicy) checkOwner(dir string, uid uint32) error {
	if uid == 0 {
		return fmt.Errorf("--workdir %s is owned by root, and the jail never runs as host root; chown it to an unprivileged user (the jail acts as the directory's owner)", dir)
	}
	if uid < p.uidMin || uid == 65534 {
		name := p.names[uid]
		if name == "" {
			name = "uid " + strconv.FormatUint(uint64(uid), 10)
		} else {
			name += " (uid " + strconv.FormatUint(uint64(uid), 10) + ")"
		}
		return fmt.Errorf("--workdir %s is owned by the system account %s, and the jail would write as it; give the jail a directory owned by an ordinary user (uid %d or above)", dir, name, p.uidMin)
	}
	return nil
}

// checkWorkdir refuses the directories that must never become a writable
// /work (checkSource), anything but a directory, and a directory with a
// mount point below it (checkNoMountsBelow).
func (p sourcePolicy) checkWorkdir(dir string) (unix.Stat_t, error) {
	st, err := p.checkSource("--workdir", dir)
	if err != nil {
		return st, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return st, fmt.Errorf("--workdir %s: not a directory", dir)
	}
	return st, checkNoMountsBelow("--workdir", dir)
}

// checkNoMountsBelow refuses a directory with a mount point below it as
// the source of a --workdir or --ro, both overlays in the jail: the mounts
// below it are locked to it in the jail's user namespace, and the kernel
// refuses an overlay whose lower layer holds locked mounts (EINVAL,
// "overlayfs: failed to clone lowerpath"), which init could only report
// as a bare "invalid argument". A bind without them would show the empty
// directories under the mounts, not the data the user meant.
func checkNoMountsBelow(flag, dir string) error {
	below, err := hostenv.MountsBelow(filepath.Clean(dir))
	if err != nil {
		return fmt.Errorf("%s %s: %w", flag, dir, err)
	}
	if len(below) == 0 {
		return nil
	}
	mp := below[len(below)-1] // the shallowest
	more := ""
	if len(below) > 1 {
		more = fmt.Sprintf(" (and %d more)", len(below)-1)
	}
	return fmt.Errorf("%s %s: there is a mount point %s inside it%s, and the kernel gives a jail only a directory without mounts below it; give a directory that holds no mount point, and bind what is mounted there on its own (--ro %s:DEST)", flag, dir, mp, more, mp)
}

// within reports whether p is dir or lies below it.
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

// ownState lists stockade's own state directories for checkPath.
func ownState() []string {
	own := []string{RunBase(), runlock.DefaultDir(), runlock.IDDir, runlock.IDsDir()}
	// Leftovers of older stockades, and private fallback bases (newFallback):
	// only those that exist, so that a jail may still get the temp
	// directory where stockade keeps nothing.
	tmp := os.TempDir()
	for _, pat := range []string{filepath.Base(runlock.TempUserDir()), fallbackPrefix() + "*"} {
		m, _ := filepath.Glob(filepath.Join(tmp, pat))
		own = append(own, m...)
	}
	out := own[:0]
	for _, d := range own {
		if filepath.IsAbs(d) {
			out = append(out, filepath.Clean(d))
		}
	}
	return out
}
