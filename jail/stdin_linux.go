package jail

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// stdinPump gives the jail a pipe for stdin and copies the caller's stdin
// into it from the host side. The caller's file itself never enters the
// jail: a terminal there could be written to past the output cap and
// --json (escape sequences into the caller's screen), have its termios
// changed (ECHO left off after the run), or be read for what the user
// types after the run; a socket could be written to or shut down. A pipe
// the jail can only read.
type stdinPump struct {
	jailEnd *os.File // the read end, for the jail's fd 0
	write   *os.File // the write end, ours
	src     int      // our own dup of the caller's fd: its number cannot be reused under us
	wakeR   int      // readable once stop has written to wake
	wake    *os.File // an *os.File: a write after the copy closed it fails instead of hitting a reused fd number
}

// newStdinPump starts copying src into a new pipe. The caller's file
// description is only read: no flag of it changes (O_NONBLOCK on a shared
// terminal would break the shell after the run), so the copy waits in
// poll(2) alongside a wake-up pipe, and stop ends it between reads.
func newStdinPump(src *os.File) (*stdinPump, error) {
	fd, err := unix.FcntlInt(src.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("stdin: dup: %w", err)
	}
	var wake [2]int
	if err := unix.Pipe2(wake[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("stdin: pipe: %w", err)
	}
	p := &stdinPump{src: fd, wakeR: wake[0], wake: os.NewFile(uintptr(wake[1]), "stdin-wake")}
	r, w, err := os.Pipe()
	if err != nil {
		p.closeFDs()
		return nil, fmt.Errorf("stdin: pipe: %w", err)
	}
	p.jailEnd, p.write = r, w
	go p.copy()
	return p, nil
}

// copy runs until src ends, the jail closes its end, or stop is called.
func (p *stdinPump) copy() {
	defer p.closeFDs()
	defer p.write.Close() // EOF for the jail
	buf := make([]byte, 32<<10)
	fds := []unix.PollFd{{Fd: int32(p.src), Events: unix.POLLIN}, {Fd: int32(p.wakeR), Events: unix.POLLIN}}
	for {
		if _, err := unix.Poll(fds, -1); err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return
		}
		if fds[1].Revents != 0 {
			return
		}
		if fds[0].Revents&(unix.POLLIN|unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) == 0 {
			continue
		}
		n, err := unix.Read(p.src, buf)
		if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
			continue // a caller's non-blocking stdin: poll again
		}
		if n <= 0 || err != nil {
			return // end of input (or unreadable: the jail sees EOF)
		}
		// Blocks in Go's poller while the jail does not read; stop's
		// Close wakes it.
		if _, err := p.write.Write(buf[:n]); err != nil {
			return
		}
	}
}

// afterStart closes the parent's copy of the jail's end, so the jail
// holds the only reader and writing stops when it is gone.
func (p *stdinPump) afterStart() { p.jailEnd.Close() }

// stop ends the copy after the run. It does not wait: a read the poll
// said would not block may still block on a terminal another process
// drained first, and then the goroutine ends with the next input.
func (p *stdinPump) stop() {
	p.jailEnd.Close()
	_, _ = p.wake.Write([]byte{0})
	p.write.Close()
}

func (p *stdinPump) closeFDs() {
	unix.Close(p.src)
	unix.Close(p.wakeR)
	p.wake.Close()
}
