package kernel

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/stockade/stockade/jail"
	"golang.org/x/sys/unix"
)

// LostStatus is the exit status of a driver whose channel failed (the
// server never closes it while the jail lives): the cell closed, replaced
// or wrote to it.
const LostStatus = 86

// ChannelLost says whether a jail's end was its driver's channel failing.
func ChannelLost(res *jail.Result) bool {
	return res != nil && res.Verdict == jail.VerdictExit && res.ExitCode == LostStatus
}

// ErrChannel is the driver's channel broken: a frame that is not the
// driver's answer, or the end of it while the jail lives on.
var ErrChannel = errors.New("the driver's channel")

// Conn is the server's end of a session's driver channel: a unix
// stream socket whose other end the jail's init passed to the payload as
// descriptor 3 (and nothing else of the jail holds, until the cell forks).
// Frames are a decimal length, a newline and that many bytes of JSON, so
// no content of a frame can end it early or start another.
type Conn struct {
	c        *net.UnixConn
	r        *bufio.Reader
	cr       *credReader
	maxFrame int64
}

// NewConn takes over f, the server's end, on which SO_PASSCRED was
// set before the jail started (so the first frame names its sender).
func NewConn(f *os.File, maxFrame int64) (*Conn, error) {
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("driver channel: %w", err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, errors.New("driver channel: not a unix socket")
	}
	cr := &credReader{c: uc}
	return &Conn{c: uc, r: bufio.NewReaderSize(cr, 64<<10), cr: cr, maxFrame: maxFrame}, nil
}

func (d *Conn) Close() error { return d.c.Close() }

// credReader reads the channel with recvmsg, keeping the credentials the
// kernel attached to the first bytes (SCM_CREDENTIALS: the sender's pid
// in the server's pid namespace, which the jail cannot choose), and
// refusing any later bytes another process sent: a child the cell forked
// with the descriptor (the driver's own descriptor is close-on-exec, not
// closed on fork) could otherwise answer in the driver's name. A stream
// read never joins bytes of two senders (unix(7): the kernel stops a
// read where the credentials change), so each read has one sender.
type credReader struct {
	c    *net.UnixConn
	cred *unix.Ucred
}

func (r *credReader) Read(p []byte) (int, error) {
	oob := make([]byte, unix.CmsgSpace(unix.SizeofUcred))
	n, oobn, _, _, err := r.c.ReadMsgUnix(p, oob)
	if n < 0 {
		n = 0 // recvmsg's -1 on an error, which bufio would take for a count
	}
	if n == 0 {
		if err == nil {
			err = io.EOF
		}
		return 0, err
	}
	var cred *unix.Ucred
	if msgs, perr := unix.ParseSocketControlMessage(oob[:oobn]); perr == nil {
		for i := range msgs {
			if c, cerr := unix.ParseUnixCredentials(&msgs[i]); cerr == nil {
				cred = c
				break
			}
		}
	}
	switch {
	case cred == nil:
		return 0, fmt.Errorf("%w: %d bytes without the kernel's credentials", ErrChannel, n)
	case r.cred == nil:
		r.cred = cred
	case cred.Pid != r.cred.Pid:
		return 0, fmt.Errorf("%w: %d bytes from process %d, not the driver (%d): a process the cell started wrote to it", ErrChannel, n, cred.Pid, r.cred.Pid)
	}
	return n, err
}

// ReadFrame reads one frame into v, strictly: a header of at most 20
// digits, a body no longer than maxFrame, JSON with no unknown field.
func (d *Conn) ReadFrame(v any, deadline time.Time) error {
	_ = d.c.SetReadDeadline(deadline)
	head, err := d.r.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) || len(head) > 21 {
			return fmt.Errorf("%w: a frame header longer than 20 digits", ErrChannel)
		}
		return err
	}
	if len(head) > 21 {
		return fmt.Errorf("%w: a frame header longer than 20 digits", ErrChannel)
	}
	n, err := strconv.ParseInt(string(head[:len(head)-1]), 10, 64)
	if err != nil || n < 0 {
		return fmt.Errorf("%w: bad frame header %q", ErrChannel, head)
	}
	if n > d.maxFrame {
		return fmt.Errorf("%w: a frame of %d bytes, more than the %d allowed", ErrChannel, n, d.maxFrame)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(d.r, body); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: bad frame: %v", ErrChannel, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: data after the frame's object", ErrChannel)
	}
	return nil
}

// Send writes one frame, the files riding on its first bytes.
func (d *Conn) Send(v any, files []*os.File, deadline time.Time) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	head := []byte(strconv.Itoa(len(body)) + "\n")
	_ = d.c.SetWriteDeadline(deadline)
	var oob []byte
	if len(files) > 0 {
		fds := make([]int, len(files))
		for i, f := range files {
			fds[i] = int(f.Fd())
		}
		oob = unix.UnixRights(fds...)
	}
	n, _, err := d.c.WriteMsgUnix(head, oob, nil)
	if err != nil {
		return err
	}
	if _, err := d.c.Write(append(head[n:], body...)); err != nil {
		return err
	}
	return nil
}

// Socket makes the channel of one jail: the server's end, with
// SO_PASSCRED, and the jail's, for jail.Streams.Pass.
func Socket() (server, jailEnd *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("driver channel: socketpair: %w", err)
	}
	if err := unix.SetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_PASSCRED, 1); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, nil, fmt.Errorf("driver channel: SO_PASSCRED: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "driver"), os.NewFile(uintptr(fds[1]), "driver-jail"), nil
}

// Cred is what the kernel said of the first bytes' sender (nil before
// any were read).
func (d *Conn) Cred() *unix.Ucred { return d.cr.cred }

// SendRun writes a run's job: its frame, then its bulk, raw, from each
// reader in order (the code or each argument, then each file), each
// exactly the length the frame gives. Nothing is encoded again or held
// whole: the readers stream, and a string is written from its own bytes
// in chunks. No deadline: the driver reads the whole job before anything
// of it runs, and the jail's end breaks the write.
func (d *Conn) SendRun(run Run, bulk ...io.Reader) error {
	var sizes []int64
	if run.Code != nil {
		sizes = append(sizes, int64(*run.Code))
	}
	for _, n := range run.Argv {
		sizes = append(sizes, int64(n))
	}
	for _, f := range run.Files {
		sizes = append(sizes, f.Size)
	}
	if len(sizes) != len(bulk) {
		return fmt.Errorf("run: %d lengths, %d readers", len(sizes), len(bulk))
	}
	body, err := json.Marshal(run)
	if err != nil {
		return err
	}
	// One buffer for the frame and the bulk: a small job is one write,
	// so the waiting driver wakes once for all of it (each wake-up is a
	// scheduling delay on a busy host).
	_ = d.c.SetWriteDeadline(time.Time{})
	w := bufio.NewWriterSize(onlyWriter{d.c}, 64<<10)
	w.WriteString(strconv.Itoa(len(body)) + "\n")
	w.Write(body)
	for i, r := range bulk {
		n, err := io.Copy(w, onlyReader{r})
		if err != nil {
			return err
		}
		if n != sizes[i] {
			return fmt.Errorf("run: part %d is %d bytes, %d in its frame", i, n, sizes[i])
		}
	}
	return w.Flush()
}

// onlyWriter and onlyReader hide ReadFrom and WriteTo, so that the copy
// goes through the buffer: a strings.Reader's WriteTo would make a []byte
// copy of the whole string for a writer without WriteString.
type onlyWriter struct{ io.Writer }
type onlyReader struct{ io.Reader }
