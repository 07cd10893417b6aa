package proctest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// BaitFile is the host file the inherited-descriptor attacks (jail, server,
// command) hold open for appending while a jail starts: empty, only root
// may open it, in a directory only root may enter.
func BaitFile(t testing.TB) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "only.log")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// WantBaitUnwritten fails t unless the bait file at path is still empty:
// nothing reached it through a descriptor the jail should not hold.
func WantBaitUnwritten(t testing.TB, path string) {
	t.Helper()
	if b, err := os.ReadFile(path); err != nil || len(b) != 0 {
		t.Errorf("%s after the run: %q %v, want it empty", path, b, err)
	}
}

// FDFlags reads the open flags (octal in fdinfo) of descriptor fd of the
// process pid, from the host: close-on-exec shows as O_CLOEXEC.
func FDFlags(pid, fd int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%d", pid, fd))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "flags:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 8, 64)
		}
	}
	return 0, fmt.Errorf("no flags in fdinfo %d of %d", fd, pid)
}
