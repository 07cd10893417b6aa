package jail

import "github.com/stockade/stockade/jail/internal/initproc"

// The parent/init protocol and the plan's steps live in initproc, the
// package a jail's init is built from, so that init can be a small binary
// of its own. These names keep the parent's code reading as before.
type (
	childConfig = initproc.Config
	step        = initproc.Step
	rlimit      = initproc.Rlimit
	childMsg    = initproc.Msg

	// SetupError is a jail that could not be set up: which step, what the
	// kernel said. The CLI exits 125 (or 126/127 for a command that cannot
	// run).
	SetupError = initproc.SetupError
)

const (
	stepTmpfs   = initproc.StepTmpfs
	stepBind    = initproc.StepBind
	stepSymlink = initproc.StepSymlink
	stepFile    = initproc.StepFile
	stepDir     = initproc.StepDir
	stepProc    = initproc.StepProc
	stepDevpts  = initproc.StepDevpts

	msgSeccomp = initproc.MsgSeccomp
	msgStarted = initproc.MsgStarted
	msgExit    = initproc.MsgExit
	msgError   = initproc.MsgError
)

// IsChild reports whether this process is a jail's init. The binary's main
// (and TestMain of packages that run jails) must call ChildMain first thing
// when it is: without an embedded init binary, Run re-executes
// /proc/self/exe as init.
func IsChild() bool { return initproc.IsInit() }

// ChildMain is init. It never returns.
func ChildMain() { initproc.Main() }
