// Package testenv says whether a test can run here and skips it, saying
// why, when it cannot: most of stockade's tests start real jails, make
// cgroups or namespaces, or only mean something inside the cgroup v2 VM.
// One helper per condition, so that every skip reads the same and the
// conditions (root, the unprivileged opt-in, the VM) live in one place.
// It is test support only; nothing outside tests imports it.
package testenv

import (
	"os"
	"testing"
)

// UnprivilegedEnv, set to anything, lets the tests that start jails run as
// a normal user where user namespaces are allowed.
const UnprivilegedEnv = "STOCKADE_TEST_UNPRIVILEGED"

// VMEnv is set by vmtest inside its VM.
const VMEnv = "STOCKADE_VM"

// NeedRoot skips t unless it runs as root; why says what needs root
// ("creates network namespaces").
func NeedRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip(why + ": needs root")
	}
}

// NeedJail skips t unless it can start real jails: as root, or as a
// normal user who set UnprivilegedEnv where user namespaces are allowed.
func NeedJail(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 && os.Getenv(UnprivilegedEnv) == "" {
		t.Skip("starts real jails: needs root (or " + UnprivilegedEnv + "=1 where user namespaces are allowed)")
	}
}

// NeedVM skips t outside vmtest's VM, where it would mean nothing.
func NeedVM(t testing.TB) {
	t.Helper()
	if os.Getenv(VMEnv) == "" {
		t.Skip(VMEnv + " is unset: this test only means something inside vmtest's VM")
	}
}

// NeedBinary skips t unless STOCKADE_BIN names the stockade make build
// made (make test sets it), and returns it; why says what the test needs
// the whole binary for.
func NeedBinary(t testing.TB, why string) string {
	t.Helper()
	bin := os.Getenv("STOCKADE_BIN")
	if bin == "" {
		t.Skip("set STOCKADE_BIN to a stockade built by make build: " + why)
	}
	return bin
}
