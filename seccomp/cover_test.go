package seccomp

import (
	"math/rand"
	"testing"
)

// checkSplit verifies that allow and refuse are disjoint, cover v, and put v
// on the side the predicate says.
func checkSplit(t *testing.T, what string, allow, refuse []Match, v uint32, allowed bool) {
	t.Helper()
	var na, nr int
	for _, m := range allow {
		if m.matches(v) {
			na++
		}
	}
	for _, m := range refuse {
		if m.matches(v) {
			nr++
		}
	}
	switch {
	case na+nr != 1:
		t.Fatalf("%s: %#x matches %d allow and %d refuse patterns, want exactly one in all", what, v, na, nr)
	case allowed && na != 1:
		t.Fatalf("%s: %#x should be allowed but is refused", what, v)
	case !allowed && nr != 1:
		t.Fatalf("%s: %#x should be refused but is allowed", what, v)
	}
}

func predicate(a ArgRule, v uint32) bool {
	if len(a.Only) > 0 {
		for _, m := range a.Only {
			if m.matches(v) {
				return true
			}
		}
		return false
	}
	for _, m := range a.Never {
		if m.matches(v) {
			return false
		}
	}
	return true
}

// TestSplitIsExactOnRandomRules checks random rules whose patterns use only
// the low 10 bits against every value of those bits.
func TestSplitIsExactOnRandomRules(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for iter := 0; iter < 300; iter++ {
		var ms []Match
		for i := 0; i < 1+rng.Intn(5); i++ {
			mask := uint32(rng.Intn(1 << 10))
			ms = append(ms, Match{Mask: mask, Value: uint32(rng.Intn(1<<10)) & mask})
		}
		a := ArgRule{Name: "x", Only: ms}
		if iter%2 == 1 {
			a = ArgRule{Name: "x", Never: ms}
		}
		allow, refuse := split(a)
		for v := uint32(0); v < 1<<10; v++ {
			// The bits above 10 are free: try them set as well.
			checkSplit(t, "random rule", allow, refuse, v, predicate(a, v))
			checkSplit(t, "random rule", allow, refuse, v|0xfffffc00, predicate(a, v|0xfffffc00))
		}
	}
}

// TestBuiltinRulesSplitExactly checks every argument rule of every policy at
// the values it names, their neighbours, the extremes and random values.
func TestBuiltinRulesSplitExactly(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	for _, name := range Names() {
		p, _ := Lookup(name)
		for _, r := range p.AllowIf {
			for _, a := range r.Args {
				allow, refuse := split(a)
				what := name + " " + r.Syscall + " " + a.Name
				values := []uint32{0, 1, 0x7fffffff, 0x80000000, 0xffffffff}
				for _, m := range append(append([]Match(nil), a.Only...), a.Never...) {
					values = append(values, m.Value, m.Value-1, m.Value+1, m.Value|^m.Mask, m.Mask)
				}
				for i := 0; i < 20000; i++ {
					values = append(values, rng.Uint32())
				}
				for _, v := range values {
					checkSplit(t, what, allow, refuse, v, predicate(a, v))
				}
				t.Logf("%s: %d allow and %d refuse patterns", what, len(allow), len(refuse))
			}
		}
	}
}

func TestCloneRuleRefusesEachNamespaceFlag(t *testing.T) {
	a := ArgRule{Name: "flags", Never: AnyBitOf(cloneNamespaceFlags)}
	allow, refuse := split(a)
	if len(allow) != 1 || allow[0] != (Match{Mask: cloneNamespaceFlags}) {
		t.Errorf("allow = %#v, want the single pattern flags&namespaces == 0", allow)
	}
	for _, f := range []uint32{cloneNewNS, cloneNewCgroup, cloneNewUTS, cloneNewIPC, cloneNewUser, cloneNewPID, cloneNewNet} {
		checkSplit(t, "clone", allow, refuse, f|sigchld, false)
		checkSplit(t, "clone", allow, refuse, f|cloneVM|cloneVfork, false)
	}
	checkSplit(t, "clone", allow, refuse, cloneVM|cloneVfork|sigchld, true)
}
