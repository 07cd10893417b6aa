package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stockade/stockade/internal/testenv"
)

// `stockade run -- python3 task.py` next to task.py: the jail's /work is
// fresh, so python3 cannot open /work/task.py. stockade must say why and
// what to run instead, on its own stderr (never in the result or stdout:
// --json stays one valid JSON object), and only when that file is there.
func TestPayloadFileInCallersDirectoryGetsAHint(t *testing.T) {
	testenv.NeedJail(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "task.py"), []byte("print(6*7)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	hint := "stockade: task.py is in your current directory, not in the jail (its /work starts empty): run it with `stockade python task.py`"

	code, out, errs := invoke(t, "", "run", "--", "python3", "task.py")
	if code != 2 || out != "" || !strings.Contains(errs, "can't open file '/work/task.py'") || !strings.Contains(errs, hint) {
		t.Errorf("run -- python3 task.py: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	code, out, errs = invoke(t, "", "run", "--json", "--", "python3", "task.py")
	var res map[string]any
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 2 || !strings.Contains(errs, hint) {
		t.Errorf("--json: exit %d, stdout %q (%v), stderr %q", code, out, err, errs)
	}
	if strings.Contains(out, "stockade python") {
		t.Errorf("--json: the hint is in the result: %s", out)
	}
	code, _, errs = invoke(t, "", "run", "--", "python3", "other.py")
	if code != 2 || strings.Contains(errs, "stockade: other.py") || strings.Contains(errs, "current directory") {
		t.Errorf("run -- python3 other.py (not here either): exit %d, stderr %q", code, errs)
	}
}

// pip install in a jail without network met Debian's PEP 668 marker first
// and printed its advice (apt, a venv), none of which a jail can use, and
// never reached the index: the user did not learn that the network was
// what was missing. It must fail on the network, with stockade's hint.
func TestPipInstallOfflineGetsTheNetworkHint(t *testing.T) {
	testenv.NeedJail(t)
	if _, err := exec.LookPath("pip"); err != nil {
		t.Skip("needs pip (python3-pip)")
	}
	// A name no Debian package installs: with requests (python3-requests,
	// which CI's deps install) pip found it already satisfied and never
	// reached the index.
	code, out, errs := invoke(t, "", "run", "--", "pip", "install", "stockade-offline-probe")
	if code == 0 || !strings.Contains(errs, "stockade: network: this jail has no network") || !strings.Contains(errs, "see --allow-net") ||
		strings.Contains(out+errs, "externally-managed-environment") {
		t.Errorf("pip install offline: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}

// TestAttackHintCarriesEscapesPastJSON: the missing-script hint quotes a
// path from the payload's stderr, which the payload writes as it likes.
// With --json the payload's output reaches the caller only inside the
// JSON string, escaped; a forged "can't open file" naming a path with
// escape sequences and enough ".." to land on a host file that exists
// (/etc/passwd from any directory) made stockade print those bytes raw
// on the caller's terminal: a window title, a cleared screen, or on many
// terminals the clipboard (OSC 52).
func TestAttackHintCarriesEscapesPastJSON(t *testing.T) {
	testenv.NeedJail(t)
	t.Chdir(t.TempDir())
	const forge = `import sys
sys.stderr.write("python3: can't open file '/work/\x1b]0;HINT-MARKER\x07\x1b]52;c;SElOVA==\x07\x1b[2J" + "/.." * 40 + "/etc/passwd': [Errno 2] No such file or directory\n")
sys.exit(2)`
	code, out, errs := invoke(t, "", "run", "--json", "--", "python3", "-c", forge)
	var res map[string]any
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 2 {
		t.Fatalf("exit %d, stdout %q (%v), stderr %q", code, out, err, errs)
	}
	if strings.ContainsAny(errs, "\x1b\x07") || strings.Contains(errs, "HINT-MARKER") {
		t.Errorf("the payload's bytes reached stockade's stderr raw: %q", errs)
	}
}
