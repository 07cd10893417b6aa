package vmtier

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/stockade/stockade/jail"
)

// The control channel (the guest's second serial port, ttyS1; a socket of
// QEMU's on the host side) carries frames: the magic, a big-endian length
// and that many bytes of JSON. The guest sends a hello frame when it is
// up, the host answers with the Plan, the guest with the Reply.
const frameMagic = "STOCKADE-VM1\n"

// File is one file carried in or out: a path below /work (or a bind's
// content), its mode bits and its bytes.
type File struct {
	Path string `json:"path"`
	Mode uint32 `json:"mode"`
	Data []byte `json:"data"`
}

// Plan is what the host sends the guest: the run's Spec (its Host left
// for the guest to fill), stdin, the --workdir's files and the content of
// each file bound read-only, by the bind's index.
type Plan struct {
	Spec  jail.Spec      `json:"spec"`
	Stdin []byte         `json:"stdin,omitempty"`
	Work  []File         `json:"work,omitempty"`
	RO    map[int][]byte `json:"ro,omitempty"`
	// Fault makes the guest misbehave on purpose: tests only ("panic":
	// init exits, "silent": it never answers, "flood": it writes to the
	// console without end). The host is the only one who writes a Plan.
	Fault string `json:"fault,omitempty"`
	// Serve, instead of one run, makes the guest serve a session
	// (session_linux.go): Spec then only sized the guest.
	Serve *ServePlan `json:"serve,omitempty"`
	// Selftest, set, asks the guest to run the selftest instead of the
	// Spec (selftest_linux.go).
	Selftest *SelftestPlan `json:"selftest,omitempty"`
}

// ServePlan makes a booted guest serve one session (session_linux.go):
// the profile (TOML, isolation "jail": the guest's jail is the inner
// wall) and the extra arguments of the guest's `stockade serve` (its
// --session-* flags).
//
// A profile whose rootfs is a prepared DIR names GuestRootfs instead:
// where the guest mounts DIR's image (Boot attaches it, as Run does).
type ServePlan struct {
	Profile []byte   `json:"profile"`
	Args    []string `json:"args,omitempty"`
}

// GuestRootfs is where a guest mounts a --rootfs DIR's image, read-only:
// its jail's root, and a ServePlan's profile's rootfs.
const GuestRootfs = "/srv/rootfs"

// Reply is the guest's answer: the jail's Result as the guest's jail made
// it, or why the guest could not run it, and /work's files after the run
// when the Plan had a --workdir.
type Reply struct {
	Result *jail.Result `json:"result"`
	Error  string       `json:"error,omitempty"`
	Work   []File       `json:"work,omitempty"`
	// Selftest is the guest's answer to a Plan's Selftest.
	Selftest *SelftestReply `json:"selftest,omitempty"`

	cancelled bool // the host's: the caller cancelled the run (Result says how)
}

type hello struct {
	Kernel string `json:"kernel"`
}

func writeFrame(w io.Writer, v any, encode func(any) ([]byte, error)) error {
	b, err := encode(v)
	if err != nil {
		return err
	}
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(b)))
	bw := bufio.NewWriterSize(w, 64<<10)
	bw.WriteString(frameMagic)
	bw.Write(n[:])
	bw.Write(b)
	return bw.Flush()
}

var errFrameTooBig = errors.New("frame larger than its bound")

// readFrame skips whatever comes before the magic (at most skip bytes),
// then reads one frame of at most max bytes.
func readFrame(r *bufio.Reader, max int64, skip int) ([]byte, error) {
	matched := 0
	for skipped := 0; matched < len(frameMagic); {
		c, err := r.ReadByte()
		if err != nil {
			return nil, err
		}
		switch {
		case c == frameMagic[matched]:
			matched++
		case c == frameMagic[0]:
			matched = 1
		default:
			matched = 0
		}
		if skipped++; skipped > skip+len(frameMagic) {
			return nil, fmt.Errorf("no frame within %d bytes", skip)
		}
	}
	var n [8]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint64(n[:])
	if size > uint64(max) {
		return nil, fmt.Errorf("%w: %d bytes, at most %d", errFrameTooBig, size, max)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	return b, nil
}
