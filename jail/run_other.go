//go:build !linux

package jail

import (
	"context"
	"errors"
	"io"
	"os"
)

// Streams connects a run to its caller.
type Streams struct {
	Stdin   *os.File
	Stdout  io.Writer
	Stderr  io.Writer
	Notices io.Writer
}

// errNotLinux: the jail is namespaces, cgroups and seccomp, all Linux's.
var errNotLinux = errors.New("stockade runs jails on Linux only")

// Run fails: there is no jail off Linux.
func Run(_ context.Context, spec Spec, _ Streams) (*Result, error) {
	msg := errNotLinux.Error()
	return &Result{Verdict: VerdictError, ExitCode: ExitJailError, Error: &msg, Limits: LimitsOf(spec),
		BlockedSyscalls: []BlockedSyscall{}, Degraded: []string{}}, setupError("start jail", errNotLinux)
}

// IsChild is false off Linux: no jail, no init.
func IsChild() bool { return false }

// ChildMain is never called off Linux.
func ChildMain() {}

// DefaultHost is the zero Host off Linux, where no jail runs.
func DefaultHost() Host { return Host{} }
