package selftest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// canaryEnv is the variable the suite sets in its own environment for the
// length of a run; a jail must start without it.
const canaryEnv = "STOCKADE_SELFTEST_CANARY"

// fixtures are the host-side targets of the attacks, made once per suite.
type fixtures struct {
	dir      string // host temp dir, world-readable: only the mount namespace keeps it out
	canary   string // a file in dir holding secret
	secret   string
	tcp      *listener // on the host's 127.0.0.1
	abstract *listener // @stockade-selftest-...
	pathSock *listener // dir/sock, mode 0777
	gateway  string    // the host's default gateway, "" if none
	hosts    string    // dir/hosts: the proxy attacks' names, pointing at fixtures
	baitLog  string    // dir/bait.log, empty, 0600: the descriptors door's file
	upstream *connectProxy
	sniAddr  string // selftest-sni.invalid: no address of this host's, never dialled itself
	cwd      string
	before   hostState

	oldEnv    string
	hadOldEnv bool
}

// listener accepts and counts connections; any count above zero is an
// escape, whatever the jailed program printed.
type listener struct {
	net.Listener
	accepted atomic.Int64
}

func listen(network, addr string) (*listener, error) {
	ln, err := net.Listen(network, addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s %s: %w", network, addr, err)
	}
	l := &listener{Listener: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			l.accepted.Add(1)
			c.Close()
		}
	}()
	return l, nil
}

func newFixtures() (fx *fixtures, err error) {
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, err
	}
	tag := hex.EncodeToString(rnd[:])
	fx = &fixtures{secret: "stockade-canary-" + tag}
	defer func() {
		if err != nil {
			fx.close()
		}
	}()
	fx.before = snapshotHost()
	if fx.dir, err = os.MkdirTemp("", "selftest-"); err != nil {
		return fx, err
	}
	if err = os.Chmod(fx.dir, 0o755); err != nil {
		return fx, err
	}
	fx.canary = filepath.Join(fx.dir, "canary")
	if err = os.WriteFile(fx.canary, []byte(fx.secret+"\n"), 0o644); err != nil {
		return fx, err
	}
	if fx.tcp, err = listen("tcp", "127.0.0.1:0"); err != nil {
		return fx, err
	}
	if fx.abstract, err = listen("unix", "@stockade-selftest-"+tag); err != nil {
		return fx, err
	}
	sock := filepath.Join(fx.dir, "sock")
	if fx.pathSock, err = listen("unix", sock); err != nil {
		return fx, err
	}
	if err = os.Chmod(sock, 0o777); err != nil {
		return fx, err
	}
	fx.hosts = filepath.Join(fx.dir, "hosts")
	hosts := "127.0.0.1 selftest-loop.invalid\n::ffff:127.0.0.1 selftest-mapped.invalid\n" +
		"169.254.169.254 selftest-meta.invalid\n10.0.0.1 selftest-private.invalid\n"
	addrs, _ := net.InterfaceAddrs()
	own := map[string]bool{}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			own[ipn.IP.String()] = true
			if !ipn.IP.IsLoopback() && ipn.IP.To4() != nil && !strings.Contains(hosts, "selftest-self") {
				hosts += ipn.IP.String() + " selftest-self.invalid\n"
			}
		}
	}
	// A documentation address the proxy may dial (it goes to the upstream
	// proxy instead), which must not be one of this host's own.
	for _, a := range []string{"198.51.100.77", "198.51.100.78", "203.0.113.77"} {
		if !own[a] {
			fx.sniAddr = a
			break
		}
	}
	hosts += fx.sniAddr + " " + sniName + "\n"
	if fx.upstream, err = newConnectProxy(); err != nil {
		return fx, err
	}
	if err = os.WriteFile(fx.hosts, []byte(hosts), 0o644); err != nil {
		return fx, err
	}
	fx.baitLog = filepath.Join(fx.dir, "bait.log")
	if err = os.WriteFile(fx.baitLog, nil, 0o600); err != nil {
		return fx, err
	}
	fx.gateway = defaultGateway()
	if fx.cwd, err = os.Getwd(); err != nil {
		return fx, err
	}
	fx.oldEnv, fx.hadOldEnv = os.LookupEnv(canaryEnv)
	if err = os.Setenv(canaryEnv, fx.secret); err != nil {
		return fx, err
	}
	return fx, nil
}

func (fx *fixtures) close() {
	for _, l := range []*listener{fx.tcp, fx.abstract, fx.pathSock} {
		if l != nil {
			l.Close()
		}
	}
	if fx.upstream != nil {
		fx.upstream.Close()
	}
	if fx.hadOldEnv {
		os.Setenv(canaryEnv, fx.oldEnv)
	} else {
		os.Unsetenv(canaryEnv)
	}
	if fx.dir != "" {
		os.RemoveAll(fx.dir)
	}
}

// baitFD is the lowest number the bait descriptors take: high, as a
// shell's exec 7< or a service manager's passed descriptors are, above
// whatever a jail's set-up uses.
const baitFD = 100

// openBait opens what a careless caller holds when it starts stockade: a
// descriptor on the suite's host directory and one appending to the bait
// file, neither close-on-exec, at baitFD and up. The returned func closes
// them; until then every process this one starts inherits them.
func (fx *fixtures) openBait() (release func(), err error) {
	var held []int
	release = func() {
		for _, fd := range held {
			unix.Close(fd)
		}
	}
	for _, o := range []struct {
		path  string
		flags int
	}{{fx.dir, unix.O_RDONLY | unix.O_DIRECTORY}, {fx.baitLog, unix.O_WRONLY | unix.O_APPEND}} {
		//stockade:no-cloexec the bait: a descriptor a caller left open, which no jail may receive
		fd, err := unix.Open(o.path, o.flags, 0)
		if err != nil {
			release()
			return nil, fmt.Errorf("open %s: %w", o.path, err)
		}
		//stockade:no-cloexec the bait again, moved up as exec 7< would place it
		high, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD, baitFD)
		unix.Close(fd)
		if err != nil {
			release()
			return nil, fmt.Errorf("move %s to %d and up: %w", o.path, baitFD, err)
		}
		held = append(held, high)
	}
	return release, nil
}

func (fx *fixtures) tcpPort() string {
	return strconv.Itoa(fx.tcp.Addr().(*net.TCPAddr).Port)
}

// defaultGateway reads the host's default IPv4 route from /proc/net/route
// (the jail has its own, empty, routing table).
func defaultGateway() string {
	b, err := os.ReadFile("/proc/net/route")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 3 || f[1] != "00000000" {
			continue
		}
		v, err := strconv.ParseUint(f[2], 16, 32)
		if err != nil || v == 0 {
			continue
		}
		// Little-endian hex of the address in network order.
		return net.IPv4(byte(v), byte(v>>8), byte(v>>16), byte(v>>24)).String()
	}
	return ""
}

// pty is a pseudo-terminal pair: the slave is the jail's stdin, as a
// terminal is when stockade is run from a shell.
type pty struct {
	master, slave *os.File
}

func openPty() (*pty, error) {
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/ptmx: %w", err)
	}
	fd := int(master.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		master.Close()
		return nil, fmt.Errorf("unlock pty: %w", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		master.Close()
		return nil, fmt.Errorf("pty number: %w", err)
	}
	slave, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		return nil, fmt.Errorf("open pty slave: %w", err)
	}
	return &pty{master: master, slave: slave}, nil
}

// pending is what reached the terminal from the jail's side: bytes waiting
// in the slave's input queue (what the caller's shell would read next) and
// bytes the line discipline echoed to the master.
func (p *pty) pending() (queued, echoed int, err error) {
	queued, err = unix.IoctlGetInt(int(p.slave.Fd()), unix.TIOCINQ)
	if err != nil {
		return 0, 0, fmt.Errorf("TIOCINQ: %w", err)
	}
	echoed, err = unix.IoctlGetInt(int(p.master.Fd()), unix.TIOCINQ)
	if err != nil && !errors.Is(err, unix.EINVAL) {
		return queued, 0, fmt.Errorf("master TIOCINQ: %w", err)
	}
	return queued, echoed, nil
}

// termios is the terminal's settings, to compare before and after a run.
func (p *pty) termios() (unix.Termios, error) {
	t, err := unix.IoctlGetTermios(int(p.slave.Fd()), unix.TCGETS)
	if err != nil {
		return unix.Termios{}, fmt.Errorf("TCGETS: %w", err)
	}
	return *t, nil
}

func (p *pty) close() {
	p.slave.Close()
	p.master.Close()
}
