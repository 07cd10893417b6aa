package netproxy

import (
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"sync"

	"github.com/stockade/stockade/api"
)

// Decision is one kind of network attempt of a run and what became of it
// (api.NetworkDecision): an entry of the result's "network" list.
type Decision = api.NetworkDecision

// maxDecisions bounds the distinct entries one run keeps, once for
// attempts at never-reachable addresses, once for allowed traffic and once
// for the other refusals: junk cannot push a metadata or loopback probe, nor
// the traffic that crossed, out of the report.
const maxDecisions = 256

// Log collects a run's decisions; it is safe for concurrent use. Notices,
// if set, receives one line the first time each distinct refusal happens.
type Log struct {
	mu       sync.Mutex
	entries  []*Decision
	byKey    map[string]*Decision
	dropped  int
	ordinary int // entries in the bucket of other refusals
	never    int // entries in the never-reachable bucket
	allowed  int // entries in the allowed bucket
	notices  io.Writer
	noNet    bool // the jail has no proxy: a direct attempt gets the one "no network" notice
	noticed  bool
	refusals int
	// addrs is the proxy's address policy (the host's own addresses
	// among its never-reachable ones), for the addresses it dialled or
	// refused: the zero policy until a proxy takes the log.
	addrs AddrPolicy
}

// NewLog returns a Log. noNetwork says the jail has no allowlist, which
// changes what a direct connection attempt is told.
func NewLog(notices io.Writer, noNetwork bool) *Log {
	return &Log{byKey: map[string]*Decision{}, notices: notices, noNet: noNetwork}
}

// entry returns the aggregate for d's kind, creating it; nil when the log
// is full (the attempt is then only counted).
func (l *Log) entry(d Decision) (*Decision, bool) {
	k := d.Host + "\x00" + strconv.Itoa(int(d.Port)) + "\x00" + d.Address + "\x00" + d.Via + "\x00" +
		strconv.FormatBool(d.Allowed) + "\x00" + d.Reason + "\x00" + d.Error + "\x00" + d.Cut
	if e, ok := l.byKey[k]; ok {
		return e, false
	}
	switch cls := l.neverClass(d); {
	case cls != "":
		if l.never >= maxDecisions {
			// Past its own bucket, one entry per class and way: finitely
			// many, so still itemised and noticed.
			f := Decision{Via: d.Via, Reason: cls + " (further attempts of this class not itemised by address)"}
			return l.summary("\x01"+f.Via+"\x00"+f.Reason, f)
		}
		l.never++
	case d.Allowed:
		if l.allowed >= maxDecisions {
			// Past its own bucket, one entry per rule, way and outcome
			// (the rules are the run's own, the cuts and failures few):
			// every connection and byte that crossed stays counted.
			f := Decision{Via: d.Via, Allowed: true, Rule: d.Rule, Cut: d.Cut}
			f.Host = "(further hosts under this rule not itemised)"
			if d.Error != "" {
				f.Error = "upstream connection failed"
			}
			return l.summary("\x02"+f.Via+"\x00"+f.Rule+"\x00"+f.Cut+"\x00"+f.Error, f)
		}
		l.allowed++
	default:
		if l.ordinary >= maxDecisions {
			return nil, false
		}
		l.ordinary++
	}
	e := d
	e.Count, e.BytesUp, e.BytesDown = 0, 0, 0
	l.byKey[k] = &e
	l.entries = append(l.entries, &e)
	return &e, true
}

// summary returns the entry under k that stands for the attempts past a
// full bucket, creating it from f.
func (l *Log) summary(k string, f Decision) (*Decision, bool) {
	if e, ok := l.byKey[k]; ok {
		return e, false
	}
	l.byKey[k] = &f
	l.entries = append(l.entries, &f)
	return &f, true
}

// Add records one attempt and its bytes.
func (l *Log) Add(d Decision) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, fresh := l.entry(d)
	if e == nil {
		l.dropped++
		return
	}
	e.Count++
	e.BytesUp += d.BytesUp
	e.BytesDown += d.BytesDown
	if !d.Allowed {
		l.refusals++
	}
	if fresh && l.notices != nil {
		if line := l.noticeFor(d); line != "" {
			fmt.Fprintln(l.notices, line)
		}
	}
}

func (l *Log) noticeFor(d Decision) string {
	line, once := Notice(d, l.noNet)
	if once {
		// One notice for the whole run: the cause is the same every time.
		if l.noticed {
			return ""
		}
		l.noticed = true
	}
	return line
}

// Notice is the line stockade's stderr gets for a decision ("" for none),
// the words of `stockade run` a reader of the program's output sees
// beside it; once says it is the one notice a jail without network gets,
// whatever the attempt.
func Notice(d Decision, noNetwork bool) (line string, once bool) {
	target := hostPort(d.Host, d.Port)
	switch {
	case d.Cut != "":
		return fmt.Sprintf("stockade: network: cut %s %s: %s", d.Via, target, d.Cut), false
	case d.Allowed || d.Via == "log":
		return "", false
	case isDirect(d.Via) && noNetwork:
		what := d.Via + " to " + target
		if d.Via == "dns" {
			what = "name lookup via " + target
		}
		return fmt.Sprintf("stockade: network: this jail has no network (%s refused); see --allow-net", what), true
	default:
		return fmt.Sprintf("stockade: network: refused %s %s: %s", d.Via, target, d.Reason), false
	}
}

// Notices are the lines Notice gives a list of decisions, as a run's
// stderr got them (the no-network one once), at most max and then one
// that counts the rest: for a front end whose reader sees a run's text
// and not its network list (a model, over MCP or a session's stderr).
func Notices(ds []Decision, noNetwork bool, max int) []string {
	var out []string
	noticed, more := false, 0
	for _, d := range ds {
		line, once := Notice(d, noNetwork)
		if line == "" || once && noticed {
			continue
		}
		noticed = noticed || once
		if len(out) >= max {
			more++
			continue
		}
		out = append(out, line)
	}
	if more > 0 {
		out = append(out, fmt.Sprintf("stockade: network: %d more refused (the result's network list has them all)", more))
	}
	return out
}

// neverClass is the never-reachable class a refusal aimed at, or "": the
// address the proxy dialled or refused under its policy, else the address
// or host as any policy sees it.
func (l *Log) neverClass(d Decision) string {
	if d.Allowed {
		return ""
	}
	for i, s := range []string{d.Address, d.Host} {
		a, err := netip.ParseAddr(s)
		if err != nil {
			ap, err := netip.ParseAddrPort(s)
			if err != nil {
				continue
			}
			a = ap.Addr()
		}
		pol := AddrPolicy{}
		if i == 0 {
			pol = l.addrs
		}
		if cls := pol.never(a); cls != "" {
			return cls
		}
	}
	return ""
}

func isDirect(via string) bool {
	return via == "connect" || via == "sendto" || via == "sendmsg" || via == "sendmmsg" || via == "dns"
}

func hostPort(host string, port uint16) string {
	if a, err := netip.ParseAddr(host); err == nil && a.Is6() {
		return "[" + host + "]:" + strconv.Itoa(int(port))
	}
	return host + ":" + strconv.Itoa(int(port))
}

// Decisions returns the entries in the order they first happened, with a
// last entry counting what did not fit.
func (l *Log) Decisions() []Decision {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Decision, 0, len(l.entries)+1)
	for _, e := range l.entries {
		out = append(out, *e)
	}
	if l.dropped > 0 {
		out = append(out, Decision{Via: "log", Reason: fmt.Sprintf("%d more attempts of kinds past the first %d not itemised", l.dropped, maxDecisions), Count: l.dropped})
	}
	return out
}

// Refusals counts refused attempts.
func (l *Log) Refusals() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.refusals
}
