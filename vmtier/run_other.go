//go:build !linux

package vmtier

import (
	"context"
	"errors"
	"io"

	"github.com/stockade/stockade/jail"
)

// GuestArg is the guest init's argument (see guest_linux.go).
const GuestArg = "__vmguest"

// GuestMain is never reached off Linux: no guest runs there.
func GuestMain() {}

// Options are the host's side of the VM tier (see run_linux.go).
type Options struct {
	Notices io.Writer
}

var errNotLinux = errors.New(`isolation "vm": the VM tier runs on Linux only`)

// Run fails: there is no VM tier off Linux.
func Run(_ context.Context, spec jail.Spec, _ jail.Streams, _ Options) (*jail.Result, error) {
	msg := errNotLinux.Error()
	return &jail.Result{Verdict: jail.VerdictError, ExitCode: jail.ExitJailError, Error: &msg, Limits: jail.LimitsOf(spec),
		BlockedSyscalls: []jail.BlockedSyscall{}, Degraded: []string{}}, errNotLinux
}
