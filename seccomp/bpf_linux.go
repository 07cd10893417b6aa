package seccomp

import (
	"embed"
	"fmt"
	"runtime"

	"github.com/stockade/stockade/seccomp/bpf"
	"golang.org/x/sys/unix"
)

//go:generate go run ./internal/gen precompiled

// precompiled holds the built-in policies compiled for one architecture by
// internal/gen: BPF is data, so a start-up can load it without libseccomp.
//
//go:embed precompiled
var precompiled embed.FS

// PrecompiledFile is the file name of a policy's compiled program for the
// architecture this binary runs on.
func PrecompiledFile(policy string) string {
	return policy + "-" + runtime.GOARCH + ".bpf"
}

// Precompiled returns the built-in policy's program compiled at build time,
// or false if there is none for this architecture.
func Precompiled(policy string) (*Program, bool) {
	b, err := precompiled.ReadFile("precompiled/" + PrecompiledFile(policy))
	if err != nil {
		return nil, false
	}
	f, err := DecodeBPF(b)
	if err != nil {
		return nil, false
	}
	return &Program{Policy: policy, filter: f}, true
}

// BPF returns the compiled filter, for a caller that compiles in one
// process and loads in another (the jail's host side sends it to init).
func (prog *Program) BPF() []unix.SockFilter {
	return append([]unix.SockFilter(nil), prog.filter...)
}

// ProgramFromBPF wraps a filter produced by Compile, carried over as BPF,
// for Load.
func ProgramFromBPF(policy string, filter []unix.SockFilter) (*Program, error) {
	if len(filter) == 0 || len(filter) > unix.BPF_MAXINSNS {
		return nil, fmt.Errorf("seccomp policy %q: %d instructions is not a loadable filter", policy, len(filter))
	}
	return &Program{Policy: policy, filter: append([]unix.SockFilter(nil), filter...)}, nil
}

// EncodeBPF is the wire and file form of a filter (see bpf.Encode).
func EncodeBPF(f []unix.SockFilter) []byte { return bpf.Encode(f) }

// DecodeBPF reverses EncodeBPF.
func DecodeBPF(b []byte) ([]unix.SockFilter, error) { return bpf.Decode(b) }
