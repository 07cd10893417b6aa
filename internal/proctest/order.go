package proctest

import (
	"slices"
	"testing"
)

// InOrder checks a step table's order: for each pair, the first step must
// come before the second in names, and both must be there. The jail's
// preparation and its init's containment are held to their orders by it.
func InOrder(t *testing.T, names []string, before [][2]string) {
	t.Helper()
	pos := func(n string) int {
		i := slices.Index(names, n)
		if i < 0 {
			t.Fatalf("no step %q in %v", n, names)
		}
		return i
	}
	for _, b := range before {
		if pos(b[0]) >= pos(b[1]) {
			t.Errorf("step %q must come before %q: %v", b[0], b[1], names)
		}
	}
}
