package selftest

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/stockade/stockade/jail"
	"github.com/stockade/stockade/profiles"
	"github.com/stockade/stockade/selftest/attacks"
	"golang.org/x/sys/unix"
)

// programs are the attacks' sources, in package attacks so that other
// packages' tests can run the same probes.
var programs = attacks.Programs

// Attack is one way out of the jail that the suite tries.
type Attack struct {
	Door   string // network, files, descriptors, identity, kernel, resources, runs, terminal
	Name   string // what it tries, e.g. "TCP to the host's 127.0.0.1 listener"
	Expect string // what a shut door looks like

	program string                                   // file in attacks/
	args    func(fx *fixtures, s jail.Spec) []string // its arguments, given the spec it runs under
	skip    func(jail.Spec, *fixtures) string        // why it does not apply, or ""
	// adjust sets the limits the attack needs on its copy of the profile
	// (lower pids and memory, so that a bomb ends soon; its own timeout),
	// and the table says which.
	adjust func(p *profiles.Profile)
	judge  func(o *outcome) (happened string, held bool)
	pty    bool // run with a pseudo-terminal as stdin
	// bait: the suite holds host descriptors without close-on-exec while
	// the attack's jail starts (fixtures.openBait).
	bait bool
	// ro are read-only binds of the host fixtures the attack needs.
	ro func(fx *fixtures) []profiles.Bind
	// allow, if set, gives the attack's jail this allowlist, its names
	// resolved from the suite's own hosts file to its fixtures.
	allow func(fx *fixtures) []string
	// upstream, if set, gives an allow attack's jail the private ranges its
	// fixtures need and its proxy stockade's own upstream proxy (the SNI
	// attack's stand-in server).
	upstream func(fx *fixtures) (allowPrivate []string, proxy string)
	// beside, if set, runs on the host while the attack's jail runs: it is
	// given the attack's spec, up (closed once the jail printed "up") and
	// ended (closed once the run returned), and reports what it saw. The
	// jail's stdin ends when it returns.
	beside func(ctx context.Context, s jail.Spec, up, ended <-chan struct{}) besideReport
}

// besideReport is what a beside function saw.
type besideReport struct {
	notices string // stockade: lines of the runs and sweeps it made
	err     error  // a run of its own that failed
}

// Options narrow a suite run.
type Options struct {
	// Doors limits the run to attacks on these doors; empty means all.
	Doors []string
	// Progress, if set, gets a line per attack as it finishes.
	Progress io.Writer
	// Slowdown, above 1, is how many times slower than a host's this
	// machine runs jails (the VM tier's guest under software emulation):
	// every attack's timeout, and the spin's bound on how soon it is
	// stopped, are that many times longer. What each attack must end
	// with stays the same.
	Slowdown int
	// Guest says the suite runs in a guest booted for it alone (the VM
	// tier): the "host" its checks compare with is that guest, whose
	// uptime is the suite's own age, nothing of the real host's.
	Guest bool
}

// slowdown is o.Slowdown, at least 1.
func (o Options) slowdown() time.Duration {
	return time.Duration(max(1, o.Slowdown))
}

// outcome is what the judge of an attack sees.
type outcome struct {
	spec   jail.Spec // as run, after adjust
	res    *jail.Result
	err    error
	last   string // the program's last line of stdout
	fx     *fixtures
	wall   time.Duration
	queued int // pty: bytes in the slave's input queue after the run
	echoed int // pty: bytes echoed to the master
	// pty: the terminal's settings differ after the run
	termiosChanged bool
	beside         besideReport
	slow           time.Duration // Options.Slowdown, at least 1
	guest          bool          // Options.Guest
}

// Run tries every attack, each in its own jail made from the profile plus
// what the attack needs (Profile.Spec builds every one, on host), one after
// the other (the host-side checks compare the host before and after, which
// concurrent runs of ours would blur). It sets the canary environment
// variable in this process for the length of the run.
func Run(ctx context.Context, base *profiles.Profile, host jail.Host, opts Options) Report {
	rep := Report{Seccomp: base.Seccomp.Policy, Cgroup: "on", Rows: []Row{}}
	if host.NoCgroup {
		rep.Cgroup = "off"
	}
	// A jail that cannot start fails every attack for the same reason,
	// which would read as every door open: find out first, in one run.
	if err := base.Validate(); err != nil {
		rep.Error, rep.NoJail = err.Error(), true
		return rep
	}
	if _, err := jail.Run(ctx, base.Spec([]string{"python3", "-c", "pass"}, host), jail.Streams{}); err != nil {
		rep.Error, rep.NoJail = err.Error(), true
		return rep
	}
	fx, err := newFixtures()
	if err != nil {
		rep.Error = "host fixtures: " + err.Error()
		return rep
	}
	defer fx.close()
	for _, a := range Attacks() {
		if len(opts.Doors) > 0 && !slices.Contains(opts.Doors, a.Door) {
			continue
		}
		if ctx.Err() != nil {
			rep.Error = "interrupted: " + ctx.Err().Error()
			break
		}
		row := runAttack(ctx, base, host, a, fx, opts)
		rep.add(row)
		if opts.Progress != nil {
			fmt.Fprintf(opts.Progress, "%s %s / %s: %s\n", row.Status, row.Door, row.Attack, oneLine(row.Happened, 100))
		}
	}
	return rep
}

// policy is the attack's own profile: base with what the attack needs,
// validated as any profile is before it becomes a jail.
func (a Attack) policy(base *profiles.Profile, fx *fixtures, slow time.Duration) (*profiles.Profile, error) {
	p := base.Clone()
	if a.adjust != nil {
		a.adjust(p)
	}
	p.Limits.Timeout *= slow
	if a.ro != nil {
		p.Filesystem.RO = append(p.Filesystem.RO, a.ro(fx)...)
	}
	if a.allow != nil {
		p.Network.Allow = a.allow(fx)
	}
	if a.upstream != nil {
		p.Network.AllowPrivate, _ = a.upstream(fx)
	}
	return p, p.Validate()
}

func runAttack(ctx context.Context, base *profiles.Profile, host jail.Host, a Attack, fx *fixtures, opts Options) Row {
	slow := opts.slowdown()
	row := Row{Door: a.Door, Attack: a.Name, Expected: a.Expect}
	p, err := a.policy(base, fx, slow)
	if err != nil {
		row.Status, row.Happened = Fail, "the attack's profile: "+err.Error()
		return row
	}
	if a.allow != nil {
		host.HostsFile = fx.hosts
	}
	if a.upstream != nil {
		_, host.UpstreamProxy = a.upstream(fx)
	}
	spec := p.Spec(nil, host)
	if a.skip != nil {
		if why := a.skip(spec, fx); why != "" {
			row.Status, row.Happened = Skip, why
			return row
		}
	}
	if a.adjust != nil {
		row.Expected += " [" + limitsNote(spec) + "]"
	}
	src, err := programs.ReadFile(a.program)
	if err != nil {
		row.Status, row.Happened = Fail, "program missing: "+err.Error()
		return row
	}
	var args []string
	if a.args != nil {
		args = a.args(fx, spec)
	}
	spec = p.Spec(append([]string{"python3", "-c", string(src)}, args...), host)
	o := &outcome{spec: spec, fx: fx, slow: slow, guest: opts.Guest}
	st := jail.Streams{}
	var term *pty
	var termBefore unix.Termios
	if a.pty {
		if term, err = openPty(); err != nil {
			row.Status, row.Happened = Fail, "no pty to test with: "+err.Error()
			return row
		}
		defer term.close()
		st.Stdin = term.slave
		if termBefore, err = term.termios(); err != nil {
			row.Status, row.Happened = Fail, err.Error()
			return row
		}
	}
	if a.bait {
		release, err := fx.openBait()
		if err != nil {
			row.Status, row.Happened = Fail, "no bait descriptors to test with: "+err.Error()
			return row
		}
		defer release()
	}
	var besideDone chan besideReport
	ended := make(chan struct{})
	if a.beside != nil {
		r, w, err := os.Pipe()
		if err != nil {
			row.Status, row.Happened = Fail, "no pipe for the attack's stdin: "+err.Error()
			return row
		}
		defer r.Close()
		st.Stdin = r
		up := &upWatch{seen: make(chan struct{})}
		st.Stdout = up
		besideDone = make(chan besideReport, 1)
		go func() {
			rep := a.beside(ctx, spec, up.seen, ended)
			w.Close()
			besideDone <- rep
		}()
	}
	begin := time.Now()
	o.res, o.err = jail.Run(ctx, spec, st)
	o.wall = time.Since(begin)
	close(ended)
	if besideDone != nil {
		o.beside = <-besideDone
	}
	row.WallMs = float64(o.wall.Microseconds()) / 1000
	o.last = lastLine(o.res.Stdout)
	if term != nil {
		if o.queued, o.echoed, err = term.pending(); err != nil {
			o.err = err
		}
		after, err := term.termios()
		o.termiosChanged = err != nil || after != termBefore
	}
	var held bool
	if o.err != nil {
		row.Happened = "the jail did not run: " + o.err.Error()
	} else {
		row.Happened, held = a.judge(o)
	}
	row.Status = Pass
	if !held {
		row.Status = Fail
		row.Output = tail(o.res.Stdout, 1500) + tail(o.res.Stderr, 1500)
	}
	return row
}

// upWatch closes seen once the start of the jail's stdout holds "up\n".
type upWatch struct {
	head []byte
	done bool
	seen chan struct{}
}

func (u *upWatch) Write(p []byte) (int, error) {
	if !u.done && len(u.head) < 4096 {
		u.head = append(u.head, p...)
		if strings.Contains(string(u.head), "up\n") {
			u.done = true
			close(u.seen)
		}
	}
	return len(p), nil
}

// limitsNote names the limits a resource attack ran under.
func limitsNote(s jail.Spec) string {
	if s.Host.NoCgroup {
		return fmt.Sprintf("NO cgroup, timeout %v", s.Timeout)
	}
	return fmt.Sprintf("pids %d, mem %dM, tmpfs %dM, out %dK, %v",
		s.Cgroup.PidsMax, s.Cgroup.MemoryMax>>20, s.TmpfsSize>>20, s.OutputLimit>>10, s.Timeout)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

func tail(s string, n int) string {
	if len(s) > n {
		s = "..." + s[len(s)-n:]
	}
	return s
}

// heldLine is the judge of most attacks: the program said HELD and the run
// ended normally.
func heldLine(o *outcome) (string, bool) {
	if rest, ok := strings.CutPrefix(o.last, "HELD "); ok && o.res.Verdict == jail.VerdictOK {
		return rest, true
	}
	return describe(o), false
}

// describe is a run that did not end as a held door should.
func describe(o *outcome) string {
	msg := fmt.Sprintf("verdict %s, exit %d", o.res.Verdict, o.res.ExitCode)
	if o.last != "" {
		msg = o.last + " (" + msg + ")"
	} else if e := lastLine(o.res.Stderr); e != "" {
		msg += ": " + e
	}
	return msg
}

// andHost adds a host-side check to a judge: check returns what the host
// saw that makes the door open, or "".
func andHost(judge func(*outcome) (string, bool), check func(*outcome) string) func(*outcome) (string, bool) {
	return func(o *outcome) (string, bool) {
		happened, held := judge(o)
		if bad := check(o); bad != "" {
			return bad + "; the program said: " + happened, false
		}
		return happened, held
	}
}

// noSecret fails a run whose output carries the canary secret.
func noSecret(o *outcome) string {
	if strings.Contains(o.res.Stdout+o.res.Stderr, o.fx.secret) {
		return "the host's canary secret appeared in the jail's output"
	}
	return ""
}

func noAccept(l func(*fixtures) *listener) func(*outcome) string {
	return func(o *outcome) string {
		if n := l(o.fx).accepted.Load(); n > 0 {
			return fmt.Sprintf("the host listener accepted %d connection(s)", n)
		}
		return ""
	}
}

// verdictIs judges a resource attack by the run's verdict alone.
func verdictIs(want ...jail.Verdict) func(*outcome) (string, bool) {
	return func(o *outcome) (string, bool) {
		happened := fmt.Sprintf("verdict %s in %.1fs", o.res.Verdict, o.wall.Seconds())
		if o.res.PidsPeak > 0 {
			happened += fmt.Sprintf(", pids peak %d", o.res.PidsPeak)
		}
		if o.res.PeakMemoryBytes > 0 {
			happened += fmt.Sprintf(", memory peak %dM", o.res.PeakMemoryBytes>>20)
		}
		if o.last != "" {
			happened += ": " + o.last
		}
		return happened, slices.Contains(want, o.res.Verdict) && !strings.HasPrefix(o.last, "OPEN")
	}
}
