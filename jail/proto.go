package jail

import (
	"encoding/json"
	"fmt"
)

// The parent and init talk over a SOCK_SEQPACKET socketpair (init's fd 3):
// one datagram per message, so neither side needs framing, and the seccomp
// listener fd rides on a message as SCM_RIGHTS.

// childConfig is the one message the parent sends: everything init needs,
// already decided. Init makes no policy decisions of its own.
type childConfig struct {
	NewRoot  string   `json:"new_root"` // host path of the (empty) directory that becomes /
	Steps    []step   `json:"steps"`
	Hostname string   `json:"hostname"`
	Args     []string `json:"args"`
	Env      []string `json:"env"`
	Path     []string `json:"path"` // directories to look up Args[0] in, inside the jail
	Rlimits  []rlimit `json:"rlimits"`
	// SetGroups says init may (and must) clear supplementary groups: true
	// when stockade runs as root and the gid map allows setgroups.
	SetGroups  bool   `json:"set_groups"`
	Seccomp    string `json:"seccomp"`     // policy name, or "off"
	SeccompBPF []byte `json:"seccomp_bpf"` // the compiled program (EncodeBPF)
	// WaitPlacement: the parent still has to move init into the run's
	// cgroup (v1) and says "go" when it has.
	WaitPlacement bool `json:"wait_placement"`
}

type rlimit struct {
	Resource int    `json:"r"`
	Cur      uint64 `json:"c"`
	Max      uint64 `json:"m"`
}

// msgKind names a message from init to the parent.
type msgKind string

const (
	msgSeccomp msgKind = "seccomp" // carries the listener fd
	msgStarted msgKind = "started" // the payload is running
	msgExit    msgKind = "exit"    // the payload ended
	msgError   msgKind = "error"   // setup failed; init exits
)

type childMsg struct {
	Kind msgKind `json:"t"`
	// exit
	Status  uint32 `json:"status,omitempty"` // wait(2) status of the payload
	UtimeUs int64  `json:"utime_us,omitempty"`
	StimeUs int64  `json:"stime_us,omitempty"`
	MaxRSS  int64  `json:"maxrss_kb,omitempty"`
	// error
	Step     string `json:"step,omitempty"`
	Message  string `json:"msg,omitempty"`
	ExitCode int    `json:"exit_code,omitempty"` // 125, 126 or 127
}

const maxMsg = 1 << 20

// goMessage releases an init that waits for its cgroup placement.
const goMessage = `{"t":"go"}`

func decodeMsg(b []byte) (childMsg, error) {
	var m childMsg
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("bad message from init: %w", err)
	}
	return m, nil
}

// SetupError is a jail that could not be set up: which step, what the
// kernel said. The CLI exits 125 (or 126/127 for a command that cannot run).
type SetupError struct {
	Step     string
	Message  string
	ExitCode int
}

func (e *SetupError) Error() string {
	if e.Step == "" {
		return e.Message
	}
	return e.Step + ": " + e.Message
}
