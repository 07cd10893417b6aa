package seccomp

import "math/bits"

// The kernel-side filter can compare an argument only with "v & mask ==
// value", and libseccomp allows one comparison per argument in a rule, with
// rules for one system call ORed. An argument rule therefore becomes two sets
// of patterns: those whose match allows the call and those whose match
// refuses it (sending it to the supervisor). The two sets must be disjoint,
// so that the order libseccomp tests them in cannot matter, and together must
// cover every value, so that no argument falls through to the filter's
// default ENOSYS and goes unreported.

// split returns how an argument rule divides the 32-bit space.
func split(a ArgRule) (allow, refuse []Match) {
	if len(a.Only) > 0 {
		return disjoint(a.Only), complement(a.Only)
	}
	return complement(a.Never), disjoint(a.Never)
}

// subtract returns disjoint patterns covering exactly b minus p.
func subtract(b, p Match) []Match {
	common := b.Mask & p.Mask
	if b.Value&common != p.Value&common {
		return []Match{b} // no value matches both
	}
	var out []Match
	cur := b
	free := p.Mask &^ b.Mask // bits p fixes and b leaves open
	for free != 0 {
		// Most significant bit first, so that refusing a few small values
		// yields the short prefix-block list a human would write.
		bit := uint32(1) << (31 - bits.LeadingZeros32(free))
		free &^= bit
		fixed := cur.Value | p.Value&bit
		out = append(out, Match{Mask: cur.Mask | bit, Value: fixed ^ bit})
		cur = Match{Mask: cur.Mask | bit, Value: fixed}
	}
	return out // cur, now inside p, is dropped
}

// complement returns disjoint patterns covering every value no pattern of ps
// matches.
func complement(ps []Match) []Match {
	out := []Match{{}}
	for _, p := range ps {
		var next []Match
		for _, b := range out {
			next = append(next, subtract(b, p)...)
		}
		out = next
	}
	return out
}

// disjoint returns disjoint patterns covering exactly what ps covers.
func disjoint(ps []Match) []Match {
	var out []Match
	for _, p := range ps {
		p.Value &= p.Mask
		pieces := []Match{p}
		for _, q := range out {
			var next []Match
			for _, piece := range pieces {
				next = append(next, subtract(piece, q)...)
			}
			pieces = next
		}
		out = append(out, pieces...)
	}
	return out
}
