package jail

import (
	"os"
	"path/filepath"
	"testing"
)

// TestAttackTimeNSNotePlanted: the note that lets init skip its probe
// (timens_linux.go) is believed only from this user's own file in this
// user's own directory. Anything another user could have planted (a file
// writable by others, a link, a directory writable by others) is ignored,
// and the probe decides; a no is never noted, so no file can make the
// payload see the host's uptime.
func TestAttackTimeNSNotePlanted(t *testing.T) {
	const name = "timens-usable-boot-6.1.0"
	var probes int
	no := func() bool { probes++; return false }
	yes := func() bool { probes++; return true }
	fresh := func() string {
		d := filepath.Join(t.TempDir(), "stockade")
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		return d
	}

	d := fresh()
	if timeNSKnownUsableIn(d, name, no) {
		t.Errorf("no note and a probe that says no: want no")
	}
	if _, err := os.Lstat(filepath.Join(d, name)); err == nil {
		t.Errorf("a no was noted as a yes")
	}
	// This boot's no spares this process its probe, and still says "probe"
	// to init (false), never "no time namespace".
	probes = 0
	if timeNSKnownUsableIn(d, name, yes) || probes != 0 {
		t.Errorf("a second run after a no: want init to probe, without a probe here (probes %d)", probes)
	}
	d = fresh()
	earlier := filepath.Join(d, "timens-probed-earlier-boot-6.1.0")
	os.WriteFile(earlier, nil, 0o600)
	if !timeNSKnownUsableIn(d, name, yes) {
		t.Errorf("a probe that says yes: want yes")
	}
	if _, err := os.Lstat(earlier); err == nil {
		t.Errorf("an earlier boot's note is left beside this boot's")
	}
	probes = 0
	if !timeNSKnownUsableIn(d, name, no) || probes != 0 {
		t.Errorf("a second run with this boot's note: want yes without a probe (probes %d)", probes)
	}
	if timeNSKnownUsableIn(d, "", yes) {
		t.Errorf("no name (boot id unreadable): want no")
	}

	planted := map[string]func(d string){
		"writable by others": func(d string) {
			p := filepath.Join(d, name)
			os.WriteFile(p, nil, 0o600)
			os.Chmod(p, 0o666)
		},
		"a symlink": func(d string) {
			os.WriteFile(filepath.Join(d, "real"), nil, 0o600)
			os.Symlink("real", filepath.Join(d, name))
		},
		"a directory": func(d string) { os.Mkdir(filepath.Join(d, name), 0o700) },
		"in a directory writable by others": func(d string) {
			os.WriteFile(filepath.Join(d, name), nil, 0o600)
			os.Chmod(d, 0o777)
		},
	}
	if os.Geteuid() == 0 {
		planted["another user's"] = func(d string) {
			p := filepath.Join(d, name)
			os.WriteFile(p, nil, 0o600)
			os.Chown(p, 4242, 4242)
		}
	}
	for what, plant := range planted {
		d := fresh()
		plant(d)
		probes = 0
		if timeNSKnownUsableIn(d, name, no) {
			t.Errorf("a note %s was believed", what)
		}
		// In a directory others may write, nothing is believed or noted
		// at all (init probes); elsewhere this process's probe decides.
		if want := 1; what != "in a directory writable by others" && probes != want {
			t.Errorf("a note %s: want the probe to decide (probes %d)", what, probes)
		}
	}
}
