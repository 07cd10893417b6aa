package selftest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/stockade/stockade/jail"
)

// siblingRuns is how many runs start beside the swept attack's jail: each
// start sweeps what dead stockades left before it takes its own slot.
const siblingRuns = 3

// runsAttacks are the doors between concurrent runs on one host.
func runsAttacks() []Attack {
	return []Attack{
		{Door: "runs", Name: "a sibling run's sweep while this run is alive",
			Expect:  "run alive, /work intact, no sweep names it",
			program: "runs_sweep.py",
			beside:  siblingSweeps,
			judge:   andHost(heldLine, sweptNothingLive)},
	}
}

// siblingSweeps waits until the attack's jail is up, then starts
// siblingRuns jails beside it, one after the other (each start sweeps the
// leftovers of dead stockades, as any stockade's does) and sweeps as a
// server's shutdown does (jail.Sweep). The attack waits for it to return
// (its stdin ends then).
func siblingSweeps(ctx context.Context, s jail.Spec, up, ended <-chan struct{}) besideReport {
	var rep besideReport
	select {
	case <-up:
	case <-ended:
		return rep
	case <-time.After(60 * time.Second):
		rep.err = fmt.Errorf("the attack's jail did not come up in 60 s")
		return rep
	}
	var notices bytes.Buffer
	sib := s
	sib.Args = []string{"true"}
	sib.ReadOnly, sib.Network = nil, jail.NetworkSpec{}
	for i := range siblingRuns {
		res, err := jail.Run(ctx, sib, jail.Streams{Notices: &notices})
		if err != nil || res.Verdict != jail.VerdictOK {
			rep.err = fmt.Errorf("sibling run %d: verdict %s: %v", i+1, res.Verdict, err)
			break
		}
	}
	if err := jail.Sweep(&notices); err != nil && rep.err == nil {
		rep.err = fmt.Errorf("sweep: %w", err)
	}
	rep.notices = notices.String()
	return rep
}

// sweptNothingLive: every run of this process is alive (or ended cleanly)
// while the suite runs, so a notice about leftovers that names one of its
// run directories or cgroups (r<slot>-<pid>-<random>) took a live run for
// a dead one's.
func sweptNothingLive(o *outcome) string {
	if o.beside.err != nil {
		return "the sibling runs could not be made: " + o.beside.err.Error()
	}
	mine := fmt.Sprintf("-%d-", os.Getpid())
	for _, line := range strings.Split(o.beside.notices, "\n") {
		if strings.Contains(line, "leftovers") && strings.Contains(line, mine) {
			return "a sweep took a live run of this process for leftovers: " + line
		}
	}
	return ""
}
