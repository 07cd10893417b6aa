// Command library is stockade used as a Go library: one run of Python in a
// fresh jail, under the built-in python profile with a tighter memory
// limit, and what the jail says about it. It calls nothing but the
// profile, Spec and Run: package jail arranges its own re-exec hook, so a
// program needs no setup of its own (go run ./examples/library, as root).
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/stockade/stockade/jail"
	"github.com/stockade/stockade/profiles"
)

func main() {
	// The policy: the built-in python profile, and one limit tightened
	// as a flag would, with the same checks a flag or a file gets.
	p := profiles.Defaults()
	if err := p.Set(profiles.FieldMemory, "256M", profiles.Origin{File: "examples/library"}); err != nil {
		fail(err)
	}
	if err := p.Validate(); err != nil {
		fail(err)
	}
	// The machine: stockade's own cgroup, its HTTPS_PROXY, its state
	// directories, as the environment says.
	spec := p.Spec([]string{"python3", "-c", "print(sum(range(100)))"}, jail.DefaultHost())
	res, err := jail.Run(context.Background(), spec, jail.Streams{})
	if err != nil {
		fail(err)
	}
	fmt.Printf("verdict %s, exit %d, memory limit %d MiB: %s", res.Verdict, res.ExitCode, *res.Limits.MemoryBytes>>20, res.Stdout)
	os.Exit(res.ExitCode)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "library:", err)
	os.Exit(jail.ExitJailError)
}
