package jail

import (
	"github.com/stockade/stockade/internal/hostenv"
)

// overflowID is the kernel's "nobody" (fs.overflowuid/gid), what an
// unmapped id shows as; giving it to the jail would make its files look
// unowned.
const overflowID = 65534

// pickJailID chooses the id, in stockade's own user namespace, that the jail
// user maps to when stockade may map any id it has (root with CAP_SETUID or
// CAP_SETGID there). preferred (HostID) wins when it exists here: on a host
// and in containers with a full map. Inside a user namespace that maps less
// (rootless podman's 65536 subordinate ids, a CI runner's single id), it is
// the highest mapped id, the one least likely to own anything, and as the
// last resort the namespace's root itself when that is an unprivileged id
// above (the rootless shape: root here, a normal user outside). Host root,
// or whatever is root in the namespace above, is never chosen.
func pickJailID(m hostenv.IDMap, preferred int) (int, bool) {
	if m.Usable(preferred) {
		return preferred, true
	}
	best := -1
	for _, r := range m {
		if r.Count == 0 {
			continue
		}
		for _, id := range []int64{int64(r.Inside) + int64(r.Count) - 1, int64(r.Inside) + int64(r.Count) - 2} {
			if id > 0 && id != overflowID && id > int64(best) && m.Usable(int(id)) {
				best = int(id)
				break
			}
		}
	}
	if best > 0 {
		return best, true
	}
	if m.Usable(0) {
		return 0, true
	}
	return -1, false
}
