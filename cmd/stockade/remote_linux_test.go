package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/api"
	"github.com/stockade/stockade/internal/clitest"
	"github.com/stockade/stockade/internal/testenv"
	"github.com/urfave/cli/v2"
)

// startServe starts `stockade serve` (this test binary as the CLI) on a
// socket in a fresh directory, with no pool and no audit log, and stops it
// when the test ends.
func startServe(t *testing.T) string {
	t.Helper()
	return startServeWith(t, "--pool", "0")
}

// startServeWith starts `stockade serve` with args, as startServe does.
func startServeWith(t *testing.T, args ...string) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "s.sock")
	srv := stockadeIn(t, "", append([]string{"serve", "--socket", sock, "--audit-log", ""}, args...)...)
	var log bytes.Buffer
	srv.Stdout, srv.Stderr = &log, &log
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { terminate(srv, 15*time.Second) })
	deadline := time.Now().Add(20 * time.Second)
	for {
		if fi, err := os.Stat(sock); err == nil && fi.Mode()&os.ModeSocket != 0 {
			return sock
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve: no socket after 20s: %s", log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestAttackRemoteRunDropsTighteningFlags: `run --server` carries only some
// flags to the server. A flag it does not carry, if accepted, would be
// dropped and the server profile's looser value would win: --work-size 1M
// and a program that writes 8 MB to /work wrote them. Every flag of run
// that is not carried must be refused (exit 125, naming it, before the
// server is asked), and the carried ones must still apply. The table is
// run's own flag list, so a flag added later is covered without an edit.
func TestAttackRemoteRunDropsTighteningFlags(t *testing.T) {
	testenv.NeedJail(t)
	sock := startServe(t)
	const write8M = "head -c 8000000 /dev/zero > /work/big && echo wrote"

	// The hole is real: through the server /work takes 8 MB (its profile's
	// /work is larger), while a local run with --work-size 1M cannot.
	if code, out, errs := clitest.RunExit(t, stockadeIn(t, "", "run", "--server", sock, "--", "sh", "-c", write8M)); code != 0 || out != "wrote\n" {
		t.Fatalf("remote run without flags: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if code, out, _ := clitest.RunExit(t, stockadeIn(t, "", "run", "--work-size", "1M", "--", "sh", "-c", write8M)); code == 0 || strings.Contains(out, "wrote") {
		t.Fatalf("local run with --work-size 1M: exit %d, stdout %q: the write fit", code, out)
	}

	// Values that would tighten the jail, where one is meaningful; any
	// other flag gets "1", since it must be refused whatever its value.
	tight := map[string]string{
		"work-size": "1M", "tmpfs-size": "1M", "file-size": "1M", "open-files": "16", "swap": "0",
		"net-max-upload": "1k", "net-max-download": "1k", "net-max-tunnels": "1",
		"allow-net": "example.invalid", "allow-private": "10.0.0.0/8", "seccomp": "strict",
		"env": "A=1", "ro": "/etc/hostname", "rootfs": "host", "workdir": t.TempDir(),
		"cgroup-parent": "x",
	}
	var refused []string
	for _, f := range runCommand(nil, nil, nil).Flags {
		name := f.Names()[0]
		if remoteFlags[name] {
			continue
		}
		refused = append(refused, name)
		args := []string{"run", "--server", sock}
		if _, isBool := f.(*cli.BoolFlag); isBool {
			args = append(args, "--"+name)
		} else {
			v, ok := tight[name]
			if !ok {
				v = "1"
			}
			args = append(args, "--"+name, v)
		}
		args = append(args, "--", "sh", "-c", write8M)
		t.Run(name, func(t *testing.T) {
			code, out, errs := clitest.RunExit(t, stockadeIn(t, "", args...))
			if code != 125 || out != "" || !strings.Contains(errs, "--"+name) || !strings.Contains(errs, "the server applies its own profile") {
				t.Errorf("%v: exit %d, stdout %q, stderr %q; want 125 naming --%s and why", args, code, out, errs, name)
			}
		})
	}
	for _, must := range []string{"work-size", "net-max-upload", "net-max-tunnels", "allow-net", "allow-private"} {
		if !strings.Contains(" "+strings.Join(refused, " ")+" ", " "+must+" ") {
			t.Errorf("--%s is not in the refused table %v", must, refused)
		}
	}

	// Two refused flags at once: both named.
	code, _, errs := clitest.RunExit(t, stockadeIn(t, "", "run", "--server", sock, "--work-size", "1M", "--allow-net", "example.invalid", "--", "true"))
	if code != 125 || !strings.Contains(errs, "--allow-net, --work-size") {
		t.Errorf("two refused flags: exit %d, stderr %q", code, errs)
	}

	// The carried flags still reach the server and apply.
	code, out, errs := clitest.RunExit(t, stockadeIn(t, "", "run", "--server", sock, "--json", "--profile", "python",
		"--memory", "64M", "--pids", "32", "--timeout", "7s", "--cpu-time", "3s", "--cpus", "0.5", "--output-limit", "4k",
		"--", "sh", "-c", "echo ok"))
	var res api.RunResponse
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.Result == nil {
		t.Fatalf("carried flags: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	l := res.Limits
	if res.Stdout != "ok\n" || l.MemoryBytes == nil || *l.MemoryBytes != 64<<20 || l.Pids == nil || *l.Pids != 32 ||
		l.TimeoutMs != 7000 || l.CPUTimeMs == nil || *l.CPUTimeMs != 3000 || l.CPUs == nil || *l.CPUs != 0.5 || l.OutputBytes != 4096 {
		t.Errorf("carried flags not applied: stdout %q, limits %+v", res.Stdout, l)
	}
}
