package server

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

// driverRequest is one exec, sent with the cell's stdin, stdout and
// stderr pipes as SCM_RIGHTS.
type driverRequest struct {
	Op        string `json:"op"`    // "exec"
	Token     string `json:"token"` // the answer must carry it
	Code      string `json:"code"`
	N         int    `json:"n"`          // the execution count: the cell's file name
	ResultMax int64  `json:"result_max"` // bytes of result, error value and traceback each
	ImagesMax int64  `json:"images_max"` // bytes of PNG in all
	// Env is set for the cell and put back after it (exec); Hello and
	// SessionEnv are a restart's: the fresh driver's first frame carries
	// Hello, and its environment is the jail's with SessionEnv added.
	Env        map[string]string `json:"env,omitempty"`
	Hello      string            `json:"hello,omitempty"`
	SessionEnv map[string]string `json:"session_env,omitempty"`
}

// driverHello is the driver's first frame.
type driverHello struct {
	Hello  string `json:"hello"`
	Python string `json:"python"`
}

// driverAnswer is what the driver says of one exec. It is the jail's
// word: the server checks its shape and token, caps its sizes, and takes
// from it only what the cell itself could have said (its result, its
// exception, its figures).
type driverAnswer struct {
	// Started, alone in its frame, says the cell is about to run: a
	// KeyboardInterrupt sent before it would be dropped as late.
	Started string `json:"started,omitempty"`
	// Hello and Python are a restarted driver's first frame.
	Hello           string     `json:"hello,omitempty"`
	Python          string     `json:"python,omitempty"`
	Token           string     `json:"token"`
	Status          string     `json:"status"` // "ok" or "exception"
	Result          *string    `json:"result"`
	ResultTruncated bool       `json:"result_truncated"`
	Error           *ExecError `json:"error"`
	Images          []string   `json:"images"`
	ImagesTruncated bool       `json:"images_truncated"`
}

// driverLost is the exit status of a driver whose channel failed (the
// server never closes it while the jail lives): the cell closed, replaced
// or wrote to it.
const driverLost = 86

// channelLost says whether a jail's end was its driver's channel failing.
func channelLost(res *jail.Result) bool {
	return res != nil && res.Verdict == jail.VerdictExit && res.ExitCode == driverLost
}

// errChannel is the driver's channel broken: a frame that is not the
// driver's answer, or the end of it while the jail lives on.
var errChannel = errors.New("the driver's channel")

// driverConn is the server's end of a session's driver channel: a unix
// stream socket whose other end the jail's init passed to the payload as
// descriptor 3 (and nothing else of the jail holds, until the cell forks).
// Frames are a decimal length, a newline and that many bytes of JSON, so
// no content of a frame can end it early or start another.
type driverConn struct {
	c        *net.UnixConn
	r        *bufio.Reader
	cr       *credReader
	maxFrame int64
}

// newDriverConn takes over f, the server's end, on which SO_PASSCRED was
// set before the jail started (so the first frame names its sender).
func newDriverConn(f *os.File, maxFrame int64) (*driverConn, error) {
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
	return &driverConn{c: uc, r: bufio.NewReaderSize(cr, 64<<10), cr: cr, maxFrame: maxFrame}, nil
}

func (d *driverConn) Close() error { return d.c.Close() }

// credReader reads the channel with recvmsg, keeping the credentials the
// kernel attached to the first bytes (SCM_CREDENTIALS: the sender's pid
// in the server's pid namespace, which the jail cannot choose).
type credReader struct {
	c    *net.UnixConn
	cred *unix.Ucred
}

func (r *credReader) Read(p []byte) (int, error) {
	oob := make([]byte, unix.CmsgSpace(unix.SizeofUcred))
	n, oobn, _, _, err := r.c.ReadMsgUnix(p, oob)
	if oobn > 0 && r.cred == nil {
		if msgs, perr := unix.ParseSocketControlMessage(oob[:oobn]); perr == nil {
			for i := range msgs {
				if c, cerr := unix.ParseUnixCredentials(&msgs[i]); cerr == nil {
					r.cred = c
					break
				}
			}
		}
	}
	if n < 0 {
		n = 0 // recvmsg's -1 on an error, which bufio would take for a count
	}
	if n == 0 && err == nil {
		err = io.EOF
	}
	return n, err
}

// readFrame reads one frame into v, strictly: a header of at most 20
// digits, a body no longer than maxFrame, JSON with no unknown field.
func (d *driverConn) readFrame(v any, deadline time.Time) error {
	_ = d.c.SetReadDeadline(deadline)
	head, err := d.r.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) || len(head) > 21 {
			return fmt.Errorf("%w: a frame header longer than 20 digits", errChannel)
		}
		return err
	}
	if len(head) > 21 {
		return fmt.Errorf("%w: a frame header longer than 20 digits", errChannel)
	}
	n, err := strconv.ParseInt(string(head[:len(head)-1]), 10, 64)
	if err != nil || n < 0 {
		return fmt.Errorf("%w: bad frame header %q", errChannel, head)
	}
	if n > d.maxFrame {
		return fmt.Errorf("%w: a frame of %d bytes, more than the %d allowed", errChannel, n, d.maxFrame)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(d.r, body); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: bad frame: %v", errChannel, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: data after the frame's object", errChannel)
	}
	return nil
}

// send writes one frame, the files riding on its first bytes.
func (d *driverConn) send(v any, files []*os.File, deadline time.Time) error {
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

// driverSocket makes the channel of one jail: the server's end, with
// SO_PASSCRED, and the jail's, for jail.Streams.Pass.
func driverSocket() (server, jailEnd *os.File, err error) {
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
