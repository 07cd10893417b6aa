//go:build linux

// Command gen compiles the built-in seccomp policies for this machine's
// architecture into seccomp/precompiled/, so that a jail's start does not
// pay libseccomp's compilation (over 10 ms for the python policy) on every
// run. `go generate ./seccomp` runs it; TestPrecompiledIsCurrent fails when
// a policy changed and the files were not regenerated.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/stockade/stockade/seccomp"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gen DIR")
		os.Exit(2)
	}
	for _, name := range seccomp.Names() {
		p, err := seccomp.Lookup(name)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		prog, err := seccomp.Compile(p)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		file := filepath.Join(os.Args[1], seccomp.PrecompiledFile(name))
		if err := os.WriteFile(file, seccomp.EncodeBPF(prog.BPF()), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}
