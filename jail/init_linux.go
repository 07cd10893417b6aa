package jail

import "github.com/stockade/stockade/jail/internal/initproc"

// IsChild reports whether this process is a jail's init. The binary's main
// (and TestMain of packages that run jails) must call ChildMain first thing
// when it is: without an embedded init binary, Run re-executes
// /proc/self/exe as init.
func IsChild() bool { return initproc.IsInit() }

// ChildMain is init. It never returns.
func ChildMain() { initproc.Main() }
