package vmtier

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/stockade/stockade/internal/loopback"
	"github.com/stockade/stockade/jail"
	"github.com/stockade/stockade/profiles"
	"github.com/stockade/stockade/selftest"
	"golang.org/x/sys/unix"
)

// The selftest through the VM tier: one guest runs every attack of the
// suite in its own jails (the guest's kernel under them), and sends back
// its report, which the host bounds and holds to the suite's rows before
// anyone reads it. One guest, not one per attack: a boot under emulation
// takes longer than the whole suite.

// Bounds of the guest's report, over the jail tier's own (selftest keeps
// 1500 bytes of each stream for a failed row).
const (
	maxSelftestReply = 4 << 20 // the reply frame
	maxHappened      = 2000
	maxExpected      = 300
	maxOutput        = 3100
	maxKernel        = 64
	// selftestPerAttack is each attack's allowance over its timeout: its
	// jail's setup and teardown in the guest, and its host-side checks.
	selftestPerAttack    = 10 * time.Second
	selftestPerAttackTCG = 30 * time.Second
	// emulatedSlowdown is how many times longer each attack's timeout
	// is in a guest under emulation (selftest.Options.Slowdown): at the
	// default ones, filling /work and the sibling runs' sweep ran out of
	// time under TCG at a load of 11 to 15.
	emulatedSlowdown = 4
)

// Selftest runs the selftest under p (isolation "vm") in one guest of the
// VM tier, on doors (all when empty), and returns the report as the host
// checked it: the rows the suite has, in its order, each bounded; a row
// the guest left out is a failure; the counts the host's own. err is set,
// with an empty report, when the guest could not be booted or did not
// answer: nothing was tested.
func Selftest(ctx context.Context, p *profiles.Profile, host jail.Host, doors []string, o Options) (selftest.Report, error) {
	rep := selftest.Report{Seccomp: p.Seccomp.Policy, Cgroup: "on", Isolation: jail.IsolationVM, Rows: []selftest.Row{}}
	if host.NoCgroup {
		rep.Cgroup = "off"
	}
	if err := p.Validate(); err != nil {
		return rep, setupErr("%w", err)
	}
	if p.Filesystem.Rootfs != profiles.RootfsHost || len(p.Filesystem.RO) > 0 ||
		(p.Filesystem.Workdir != profiles.WorkdirFresh && p.Filesystem.Workdir != profiles.WorkdirNone) {
		return rep, setupErr(`isolation "vm": the selftest runs in the guest with the guest's root and a fresh /work: a profile's rootfs, ro binds and workdir directory do not reach it (docs/isolation.md)`)
	}
	inner := p.Clone()
	inner.Isolation, inner.VMEmulate = jail.IsolationJail, false
	spec := p.Spec([]string{"selftest"}, host)
	t, err := tierFor(spec, o)
	if err != nil {
		return rep, err
	}
	opts := selftest.Options{Doors: doors, Slowdown: 1}
	per := selftestPerAttack
	if !t.kvm {
		opts.Slowdown, per = emulatedSlowdown, selftestPerAttackTCG
	}
	planned, timeouts := selftest.Planned(inner, opts)
	// The guest's answer is due after every attack's timeout and
	// allowance: the boot's answer timer counts spec.Timeout.
	spec.Timeout = timeouts + time.Duration(len(planned)+1)*per
	plan := &Plan{Spec: spec, Fault: o.fault, Selftest: &SelftestPlan{Profile: *inner, Doors: doors, NoCgroup: host.NoCgroup, Slowdown: opts.Slowdown}}
	plan.Spec.Host = jail.Host{}
	reply, err := t.boot(ctx, spec, plan, o)
	if err != nil {
		return rep, err
	}
	if reply.cancelled {
		return rep, context.Cause(ctx)
	}
	if reply.Selftest == nil {
		return rep, setupErr("isolation vm: the guest could not run the selftest: %s", bound(reply.Error, maxHappened))
	}
	checkReport(&rep, reply.Selftest, planned)
	return rep, nil
}

// checkReport fills rep from the guest's reply, trusting none of it
// further than it must: the rows are the planned ones (the door and
// attack the host's, Expected the guest's when it extends the host's),
// each in the planned order; a planned row the guest did not report
// fails, rows the suite does not have are left out (and said), a status
// other than the three fails; every text is bounded; the counts are
// counted here.
func checkReport(rep *selftest.Report, g *SelftestReply, planned []selftest.Row) {
	rep.Kernel = bound(g.Kernel, maxKernel)
	if g.Report.NoJail {
		rep.NoJail = true
		rep.Error = "in the guest: " + bound(g.Report.Error, maxHappened)
		return
	}
	if g.Report.Error != "" {
		rep.Error = "in the guest: " + bound(g.Report.Error, maxHappened)
	}
	type key struct{ door, attack string }
	got := make(map[key]selftest.Row, len(g.Report.Rows))
	unknown := 0
	want := make(map[key]bool, len(planned))
	for _, r := range planned {
		want[key{r.Door, r.Attack}] = true
	}
	for _, r := range g.Report.Rows {
		k := key{r.Door, r.Attack}
		if _, dup := got[k]; dup || !want[k] {
			unknown++
			continue
		}
		got[k] = r
	}
	for _, p := range planned {
		row := p
		r, ok := got[key{p.Door, p.Attack}]
		switch {
		case !ok:
			row.Status = selftest.Fail
			row.Happened = "the guest's report has no row for this attack"
		case r.Status != selftest.Pass && r.Status != selftest.Fail && r.Status != selftest.Skip:
			row.Status = selftest.Fail
			row.Happened = fmt.Sprintf("the guest reported status %q", bound(string(r.Status), 16))
		default:
			row.Status = r.Status
			row.Happened = bound(r.Happened, maxHappened)
			row.Output = bound(r.Output, maxOutput)
			if strings.HasPrefix(r.Expected, p.Expected) {
				// The limits the attack ran under, as the guest noted them.
				row.Expected = bound(r.Expected, maxExpected)
			}
			if r.WallMs >= 0 && r.WallMs < 24*3600*1000 {
				row.WallMs = r.WallMs
			}
		}
		rep.Rows = append(rep.Rows, row)
	}
	if unknown > 0 {
		msg := fmt.Sprintf("the guest's report had %d row(s) the suite does not have, or twice; left out", unknown)
		if rep.Error != "" {
			msg = rep.Error + "; " + msg
		}
		rep.Error = msg
	}
	rep.Count()
}

// bound is s cut to at most n bytes of valid UTF-8, with control
// characters other than newline and tab shown as '?': a guest's text
// reaches the caller's terminal.
func bound(s string, n int) string {
	if len(s) > n {
		s = s[:n]
	}
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' || !unicode.IsControl(r) {
			return r
		}
		return '?'
	}, strings.ToValidUTF8(s, "?"))
}

// guestSelftest is the guest's side: the suite under the plan's profile,
// its jails the guest's (the second wall is what it attacks), with the
// guest's loopback up for the suite's listeners.
func guestSelftest(p *Plan) Reply {
	sp := p.Selftest
	if err := loopback.Up(); err != nil {
		return Reply{Error: "guest: selftest: " + err.Error()}
	}
	prof := sp.Profile
	prof.Isolation, prof.VMEmulate = jail.IsolationJail, false
	host := jail.Host{CgroupParent: guestCgroup, CacheDir: "/var/cache/stockade", NoCgroup: sp.NoCgroup}
	if sp.NoCgroup {
		host.CgroupParent = ""
	}
	rep := selftest.Run(context.Background(), &prof, host, selftest.Options{Doors: sp.Doors, Slowdown: sp.Slowdown, Guest: true})
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	return Reply{Selftest: &SelftestReply{Report: rep, Kernel: unix.ByteSliceToString(uts.Release[:])}}
}
