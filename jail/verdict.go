package jail

// ending is everything a run's verdict is decided from, gathered where each
// fact is known: the supervisor (time, CPU, cancel), the payload's wait
// status and output, and the cgroup (OOM kills, the pids limit).
type ending struct {
	Cancelled     bool // our caller cancelled, and our kill ended the payload
	OOMKilled     bool // the kernel OOM-killed something in the jail
	PidsLimitHit  bool // a fork or clone failed at the pids limit
	DiskFull      bool // /work was full (of bytes or inodes) when stockade looked
	CPUOver       bool // the CPU-time limit ended the run
	TimedOut      bool // the wall-clock limit ended the run
	SeccompKilled bool // the payload died of SIGSYS under the filter
	Signaled      bool // the payload died of a signal
	OutputCut     bool // a stream went past the output limit
	ExitStatus    int  // the payload's exit status when it exited
}

// verdict is the one place the precedence of verdicts lives, in the order
// of the Verdict constants: the first that holds is the one the user has to
// fix. A fork bomb that also ran out of time is "pids"; a run that exited
// 0 with its output cut is "output". A jail that could not be set up never
// gets here: its verdict is "error".
func (e ending) verdict() Verdict {
	switch {
	case e.Cancelled:
		return VerdictCancelled
	case e.OOMKilled:
		return VerdictMemory
	case e.PidsLimitHit:
		return VerdictPids
	case e.DiskFull:
		return VerdictDisk
	case e.CPUOver:
		return VerdictCPU
	case e.TimedOut:
		return VerdictTimeout
	case e.SeccompKilled:
		return VerdictSeccomp
	case e.Signaled:
		return VerdictSignal
	case e.OutputCut:
		return VerdictOutput
	case e.ExitStatus != 0:
		return VerdictExit
	}
	return VerdictOK
}
