// Package jailinit is a jail's init: the process that runs as pid 1 of the
// jail's namespaces, builds its root from the parent's plan, drops every
// privilege, loads seccomp and starts the payload. It is its own package,
// depending on nothing but the standard library and x/sys, so that it can
// also be built as a small static binary (jailinit) that starts in a
// fraction of the time the whole stockade binary takes; the protocol types
// the parent shares with it live here too.
package jailinit

import (
	"bytes"
	"encoding/json"
	"errors"
)

// Identity of the jailed user inside the jail, and the base of the host ids
// it maps to when stockade runs as root. 0x70000000 starts the range that
// systemd's UIDS-GIDS document leaves unused (0x70000000-0x7FFDFFFF, between
// the container ranges, 0x80000-0x6FFFFFFF, that systemd-nspawn
// --private-users=pick and nsresourced hand out 64K at a time, and the
// foreign range at 0x7FFE0000): below it, a container given the same
// range would share host uids with the jails. It is far above useradd's,
// systemd's dynamic users' and the usual subuid(5) ranges, and below 2^31,
// which some tools take for negative.
const (
	JailUID = 1000
	JailGID = 1000
	HostID  = 0x70000000
)

// Exit statuses of a jail that could not start its command.
const (
	ExitJailError = 125
	ExitCannotRun = 126
	ExitNotFound  = 127
)

// The parent and init talk over a SOCK_SEQPACKET socketpair (init's fd 3):
// one datagram per message, so neither side needs framing, and the seccomp
// listener fd rides on a message as SCM_RIGHTS.

// Config is the one message the parent sends: everything init needs,
// already decided. Init makes no policy decisions of its own.
type Config struct {
	NewRoot  string   `json:"new_root"` // host path of the (empty) directory that becomes /
	Steps    []Step   `json:"steps"`
	Hostname string   `json:"hostname"`
	Args     []string `json:"args"`
	Env      []string `json:"env"`
	Path     []string `json:"path"` // directories to look up Args[0] in, inside the jail
	Rlimits  []Rlimit `json:"rlimits"`
	// SetGroups says init may (and must) clear supplementary groups: true
	// when stockade runs as root and the gid map allows setgroups.
	SetGroups bool   `json:"set_groups"`
	Seccomp   string `json:"seccomp"` // policy name, or "off"
	// SeccompBPF is the compiled program (bpf.Encode). It travels after
	// the JSON, not in it (see EncodeConfig).
	SeccompBPF []byte `json:"-"`
	// WaitPlacement: the parent still has to move init into the run's
	// cgroup (v1) and says "go" when it has.
	WaitPlacement bool `json:"wait_placement"`
	// TimeNSUsable: the parent knows, from this boot's note, that this
	// kernel can start a process with a time namespace pending, and init
	// need not probe (see jail/timens_linux.go). False means "probe".
	TimeNSUsable bool `json:"time_ns_usable,omitempty"`
	// ProxyPort, when not 0, is where init opens the listening sockets of
	// the jail's egress proxy (127.0.0.1 and [::1], inside the jail's
	// network namespace) and hands them to the parent.
	ProxyPort uint16 `json:"proxy_port,omitempty"`
	// CPUs is the payload's affinity mask (empty: leave it as is), so
	// sched_getaffinity and nproc count the CPUs of its limit.
	CPUs []int `json:"cpus,omitempty"`
	// PassFDs are descriptors init received from the parent on purpose,
	// beside the control socket, for the payload: the payload gets them as
	// 3, 4, ... in this order, and init keeps none (a server session's
	// driver talks to the host on one). Every other inherited descriptor
	// is the caller's accident and never reaches the payload.
	PassFDs []int `json:"pass_fds,omitempty"`
	// Phases asks init to time its steps (see Mark); off, it reads no
	// clock for them.
	Phases bool `json:"phases,omitempty"`
}

// EncodeConfig is the plan's wire form: the Config as JSON, a newline, and
// the seccomp program's raw bytes. The program is three quarters of a
// plan (about 12 KB of BPF, 16 KB in base64), and encoding/json scanned
// every one of its base64 bytes twice (the validity check, then the
// decode) in init's cold start: 0.1-0.25 ms of every run. JSON as
// json.Marshal writes it holds no raw newline (one inside a string is
// escaped), so the first newline ends it.
func EncodeConfig(c *Config) ([]byte, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	b = append(b, '\n')
	return append(b, c.SeccompBPF...), nil
}

// DecodeConfig reverses EncodeConfig.
func DecodeConfig(b []byte) (*Config, error) {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return nil, errors.New("plan: no newline after its JSON")
	}
	var c Config
	if err := json.Unmarshal(b[:i], &c); err != nil {
		return nil, err
	}
	if p := b[i+1:]; len(p) > 0 {
		c.SeccompBPF = p
	}
	return &c, nil
}

// FirstPassFD is where the parent puts the first of Config.PassFDs in
// init: right after the control socket (3).
const FirstPassFD = 4

// Rlimit is one setrlimit(2) call.
type Rlimit struct {
	Resource int    `json:"r"`
	Cur      uint64 `json:"c"`
	Max      uint64 `json:"m"`
}

// MsgKind names a message from init to the parent.
type MsgKind string

const (
	MsgSeccomp MsgKind = "seccomp" // carries the listener fd
	MsgProxy   MsgKind = "proxy"   // carries the proxy's listening sockets
	MsgStarted MsgKind = "started" // the payload is running
	MsgExit    MsgKind = "exit"    // the payload ended
	MsgError   MsgKind = "error"   // setup failed; init exits
	MsgWork    MsgKind = "work"    // carries the mount fd of the /work tmpfs
)

// Msg is a report from init.
type Msg struct {
	Kind MsgKind `json:"t"`
	// exit
	Status  uint32 `json:"status,omitempty"` // wait(2) status of the payload
	UtimeUs int64  `json:"utime_us,omitempty"`
	StimeUs int64  `json:"stime_us,omitempty"`
	MaxRSS  int64  `json:"maxrss_kb,omitempty"`
	// error
	Step     string `json:"step,omitempty"`
	Message  string `json:"msg,omitempty"`
	ExitCode int    `json:"exit_code,omitempty"` // 125, 126 or 127
	// started, exit: when init's steps began and the payload started or
	// ended, with Config.Phases.
	Phases []Mark `json:"phases,omitempty"`
}

// Mark is when a step began: CLOCK_MONOTONIC in nanoseconds, which init
// and stockade read alike (the jail's time namespace moves only
// CLOCK_BOOTTIME, and only for the payload), so their marks order on one
// line.
type Mark struct {
	Name string `json:"n"`
	Mono int64  `json:"t"`
}

// MaxMsg bounds one message.
const MaxMsg = 1 << 20

// GoMessage releases an init that waits for its cgroup placement.
const GoMessage = `{"t":"go"}`

// DecodeMsg parses a report from init.
func DecodeMsg(b []byte) (Msg, error) {
	var m Msg
	err := json.Unmarshal(b, &m)
	return m, err
}

// SetupError is a jail that could not be set up: which step, and why.
// The CLI exits with ExitCode: 125, or 126/127 for a command that cannot
// run. It is the one type of it on both sides of the socket: init makes
// it of a failed step and reports its Step, Message and ExitCode (MsgError),
// and the parent makes it again of that report, or of a failure of its own
// (jail.SetupError is this type).
type SetupError struct {
	Step string
	// Message is the reason as text: what init reported from inside the
	// jail, where only text crosses the socket. Err is the cause when the
	// parent side had one; errors.Is and errors.As see it through Unwrap.
	Message  string
	Err      error
	ExitCode int
}

func (e *SetupError) Error() string {
	msg := e.Message
	if e.Err != nil {
		msg = e.Err.Error()
	}
	if e.Step == "" {
		return msg
	}
	return e.Step + ": " + msg
}

func (e *SetupError) Unwrap() error { return e.Err }

// StepKind is one kind of thing init does to build the new root.
type StepKind string

const (
	StepTmpfs   StepKind = "tmpfs"   // a fresh tmpfs at Dest
	StepBind    StepKind = "bind"    // Source bound at Dest (read-only unless Writable)
	StepSymlink StepKind = "symlink" // Dest -> Link
	StepFile    StepKind = "file"    // a generated file with Data
	StepDir     StepKind = "dir"     // an empty directory
	StepProc    StepKind = "proc"    // procfs of the jail's pid namespace
	StepDevpts  StepKind = "devpts"  // a private devpts instance
	StepMask    StepKind = "mask"    // a generated read-only file bound over Dest (a host figure in /proc)
	// StepOverlay mounts Source (read-only lower) with the upper layer in
	// the tmpfs at Upper, which is then detached from the tree.
	StepOverlay StepKind = "overlay"
)

// Step is plain data sent to init. Dest is a path inside the jail; init
// prefixes the new root. Source is a host path.
type Step struct {
	Kind     StepKind `json:"k"`
	Dest     string   `json:"d"`
	Source   string   `json:"s,omitempty"`
	Link     string   `json:"l,omitempty"`
	Data     string   `json:"data,omitempty"`
	Mode     uint32   `json:"m,omitempty"`
	Size     int64    `json:"z,omitempty"`
	Inodes   int64    `json:"n,omitempty"`   // tmpfs: most inodes (files, directories, links)
	Report   bool     `json:"rep,omitempty"` // tmpfs: hand the parent an fd of it (MsgWork)
	Dir      bool     `json:"dir,omitempty"` // bind of a directory (else a file)
	Writable bool     `json:"w,omitempty"`   // bind stays writable
	Exec     bool     `json:"x,omitempty"`   // exec allowed (binds of the root's programs)
	Device   bool     `json:"dev,omitempty"` // bind of a device node: keep nodev off
	User     bool     `json:"u,omitempty"`   // source came from the user: resolve without symlinks
	Optional bool     `json:"opt,omitempty"` // skip quietly if the source is gone
	// Hide mounts a read-only bind through an overlay of its source: a unix
	// socket or FIFO below it, made before or after the run starts, is not
	// the host's inside the jail (connect is refused), and mountinfo shows
	// no host path.
	Hide  bool   `json:"hide,omitempty"`
	Upper string `json:"up,omitempty"` // overlay: the tmpfs (a Dest) that takes the writes
}
