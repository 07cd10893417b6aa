package clitest

import (
	"os/exec"
	"regexp"
	"testing"

	"github.com/stockade/stockade/internal/testenv"
)

// HelpFlags are the long flags (without "--") that `stockade SUB --help`
// of the built binary lists, for a test that checks an example's command
// line against them; the test skips without the binary.
func HelpFlags(t *testing.T, sub string) map[string]bool {
	t.Helper()
	bin := testenv.NeedBinary(t, "its --help lists the flags")
	out, err := exec.Command(bin, sub, "--help").Output()
	if err != nil {
		t.Fatalf("stockade %s --help: %v", sub, err)
	}
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+--([a-z][a-z0-9-]*)`).FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	if len(flags) < 3 {
		t.Fatalf("stockade %s --help lists %d flags:\n%s", sub, len(flags), out)
	}
	return flags
}
