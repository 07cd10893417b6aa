//go:build !linux

package seccomp

import (
	"errors"
	"runtime"
)

// The policies and the decoder are portable data; installing a filter is
// Linux's alone.

var errUnsupported = errors.New("seccomp: filters need Linux, not " + runtime.GOOS)

// Blocked is one distinct refused system call of a run.
type Blocked struct {
	Name    string `json:"name"`
	Count   int    `json:"count"`
	Example string `json:"example"`
}

// Load fails: there is no seccomp here.
func Load(*Policy) (int, error) { return -1, errUnsupported }

// Supervisor does nothing here.
type Supervisor struct{}

// NewSupervisor returns a supervisor with nothing to supervise.
func NewSupervisor(int) *Supervisor { return &Supervisor{} }

// Run returns at once.
func (*Supervisor) Run() {}

// Close does nothing.
func (*Supervisor) Close() error { return nil }

// Blocked is always empty.
func (*Supervisor) Blocked() []Blocked { return nil }
