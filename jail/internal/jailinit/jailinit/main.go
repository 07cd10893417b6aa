//go:build linux

// Command jailinit is a jail's init as a small static binary. The
// Makefile embeds it in stockade, which runs it from a sealed memfd: it
// starts in a fraction of the time the whole stockade binary takes, and
// the jail's /proc/1/exe is a sealed copy, never the stockade file on the
// host (CVE-2019-5736).
package main

import (
	"fmt"
	"os"
	"runtime"

	"github.com/stockade/stockade/jail/internal/jailinit"
)

// init keeps the main goroutine on the main thread, where Main locks it:
// the time namespace's offsets belong to the thread group leader.
func init() { runtime.LockOSThread() }

func main() {
	if !jailinit.IsInit() {
		fmt.Fprintln(os.Stderr, "jailinit: this is a jail's init; stockade runs it")
		os.Exit(jailinit.ExitJailError)
	}
	jailinit.Main()
}
