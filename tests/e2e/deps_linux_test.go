package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// scripts/deps as a fresh machine meets it, with the host's answers
// replaced: dpkg-query says every package is missing (or installed), id
// says a normal user (so it names the apt-get line instead of running it),
// and node and npm say the version the test gives, or are absent.
func runDeps(t *testing.T, target, packages, nodeVersion string) (int, string) {
	t.Helper()
	fake := t.TempDir()
	scripts := map[string]string{
		"dpkg-query": `[ "$FAKE_DPKG" = installed ] && printf 'install ok installed'; exit 0`,
		"id":         `echo 1000`,
		"node":       `[ -n "$FAKE_NODE" ] || exit 127; echo "v$FAKE_NODE"`,
		"npm":        `[ -n "$FAKE_NODE" ] || exit 127; echo 9.2.0`,
	}
	for name, body := range scripts {
		if err := os.WriteFile(filepath.Join(fake, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("../../scripts/deps", target)
	cmd.Env = append(os.Environ(), "PATH="+fake+":"+os.Getenv("PATH"), "FAKE_DPKG="+packages, "FAKE_NODE="+nodeVersion)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String()
}

// `make demo` on a fresh Debian 12 installed libseccomp-dev, pkg-config and
// python3 only, and README's data job then failed in the default jail (the
// host's /usr/bin/python3) with ModuleNotFoundError for pandas: the demo's
// packages must include the data stack.
func TestDepsDemoWantsTheDataStack(t *testing.T) {
	code, out := runDeps(t, "demo", "missing", "")
	if code != 1 || !strings.Contains(out, "apt-get install -y ") {
		t.Fatalf("scripts/deps demo, nothing installed: exit %d, %q", code, out)
	}
	for _, p := range []string{"python3-numpy", "python3-pandas", "python3-matplotlib", "python3 "} {
		if !strings.Contains(out+" ", " "+p) {
			t.Errorf("scripts/deps demo does not ask for %s: %q", strings.TrimSpace(p), out)
		}
	}
}

// make check's MCP clients need Node.js: the SDK's client 18 or later, the
// Inspector declaring 22.7.5. scripts/deps check asks for node as a
// command (one from NodeSource is as good as Debian's), fails below 18
// saying how to get one, and says what the Inspector declares below that.
func TestDepsCheckChecksNodesVersion(t *testing.T) {
	for _, c := range []struct {
		node     string
		code     int
		want     []string
		wantNone string
	}{
		{"", 1, []string{"apt-get install -y nodejs npm"}, "note:"},
		{"16.20.2", 1, []string{"make check needs Node.js 18 or later for its MCP clients; node is v16.20.2", "apt-get install nodejs npm", "NodeSource"}, "apt-get install -y"},
		{"18.19.0", 0, []string{"note: the pinned MCP Inspector declares Node >=22.7.5; with node v18.19.0"}, "needs Node.js"},
		{"22.12.0", 0, nil, "Node"},
	} {
		code, out := runDeps(t, "check", "installed", c.node)
		if code != c.code || (c.wantNone != "" && strings.Contains(out, c.wantNone)) {
			t.Errorf("node %q: exit %d (want %d), %q (must not say %q)", c.node, code, c.code, out, c.wantNone)
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("node %q: exit %d, %q lacks %q", c.node, code, out, w)
			}
		}
	}
	// The other targets do not ask for node.
	if code, out := runDeps(t, "build", "installed", ""); code != 0 || out != "" {
		t.Errorf("scripts/deps build without node: exit %d, %q", code, out)
	}
}
