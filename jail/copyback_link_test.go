package jail

import "testing"

// A symlink copy-back recreates must lead to a place inside DIR, whatever
// the links it passes through lead to.
func TestLinkStaysInside(t *testing.T) {
	for _, tc := range []struct {
		rel, target string
		inside      bool
	}{
		{"link", "file", true},
		{"link", "sub/file", true},
		{"link", "./sub/./file", true},
		{"link", ".", true},
		{"sub/link", "..", true},         // DIR itself
		{"sub/link", "../other/f", true}, // a sibling
		{"a/b/link", "../../f", true},
		{"link", "/etc/shadow", false},
		{"link", "/", false},
		{"link", "", false},
		{"link", "..", false}, // DIR's parent
		{"link", "../dir/f", false},
		{"sub/link", "../..", false},
		{"a/b/link", "../../../etc", false},
		{"link", "sub/..", false},      // inside as written, but sub may be a link to ..
		{"sub/link", "x/../..", false}, // the same, one level down
		{"a/b/link", "../x/../..", false},
	} {
		if got := linkStaysInside(tc.rel, tc.target); got != tc.inside {
			t.Errorf("link %s -> %q: inside %v, want %v", tc.rel, tc.target, got, tc.inside)
		}
	}
}
