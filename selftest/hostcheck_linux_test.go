package selftest

import "testing"

// A mount made on the host by someone else during a selftest (a container,
// an automount, another test's netns) is the host's, not a leftover; one
// left in a run directory or stockade's state is.
func TestHostMountsAreNotLeftovers(t *testing.T) {
	before := `22 1 0:21 / / rw,relatime - ext4 /dev/vda1 rw
30 22 0:26 / /run rw - tmpfs tmpfs rw
`
	host := before + `41 30 0:4 net:[4026532] /run/netns/ci rw - nsfs nsfs rw
42 22 0:50 / /var/lib/docker/overlay2/x/merged rw - overlay overlay rw
`
	leaked := host + `43 30 0:51 / /run/stockade/dirs/r0-123-abcd/root rw - tmpfs tmpfs rw
44 22 0:52 / /tmp/stockade-1000.x/r1-9-ef/root rw - tmpfs tmpfs rw
`
	b := hostState{mounts: stockadeMounts(before)}
	if got := (hostState{mounts: stockadeMounts(host)}).leftSince(b); got != "" {
		t.Errorf("the host's own mounts counted as left by a run: %s", got)
	}
	if got := (hostState{mounts: stockadeMounts(leaked)}).leftSince(b); got != "2 extra mounts" {
		t.Errorf("two mounts left in stockade's directories: got %q", got)
	}
}
