package vmtier

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/proctest"
	"github.com/stockade/stockade/jail"
	"github.com/stockade/stockade/profiles"
	"github.com/stockade/stockade/selftest"
)

// replyingVMM is a stand-in for QEMU that boots nothing: it listens on the
// control channel's socket as QEMU's chardev does, says hello, takes the
// plan and answers with the bytes of reply, as a hostile guest could.
func replyingVMM(t *testing.T, reply []byte) Options {
	o := needVM(t)
	dir := t.TempDir()
	answer := filepath.Join(dir, "reply")
	if err := os.WriteFile(answer, reply, 0o644); err != nil { // QEMU's uid reads it
		t.Fatal(err)
	}
	script := `#!` + hostPython + `
import socket, struct, sys
path = [a for a in sys.argv if "id=ctl," in a][0].split("path=")[1].split(",")[0]
s = socket.socket(socket.AF_UNIX)
s.bind(path)
s.listen(1)
c, _ = s.accept()
def frame(b):
    c.sendall(b"` + strings.TrimSuffix(frameMagic, "\n") + `\n" + struct.pack(">Q", len(b)) + b)
frame(b'{"kernel": "6.1.0-fake"}')
f = c.makefile("rb")
f.read(len("` + strings.TrimSuffix(frameMagic, "\n") + `\n"))
f.read(struct.unpack(">Q", f.read(8))[0])
frame(open(` + "'" + answer + "'" + `, "rb").read())
c.close()
`
	f := filepath.Join(dir, "qemu")
	if err := os.WriteFile(f, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	o.QEMU = f
	// The VMM's jail exposes the script's Python, its library and the answer.
	py, err := filepath.EvalSymlinks(hostPython)
	if err != nil {
		t.Fatal(err)
	}
	o.vmmTools = []string{filepath.Join("/usr/lib", filepath.Base(py)), answer}
	return o
}

func selftestVM(t *testing.T, o Options, doors ...string) (selftest.Report, error) {
	t.Helper()
	p := profiles.Defaults().Clone()
	p.Isolation, p.VMEmulate = profiles.IsolationVM, KVM() != nil
	var rep selftest.Report
	var err error
	proctest.Within(t, 6*time.Minute, func(ctx context.Context) {
		rep, err = Selftest(ctx, p, jail.Host{}, doors, o)
	})
	return rep, err
}

// A guest that lies in its selftest report: it leaves out the row of a door
// it opened, adds a row the suite does not have, counts what it likes,
// writes a megabyte of "happened" with terminal escapes. The host's report
// has every planned row (the one left out failing), its own counts, and
// bounded text; the suite does not pass.
func TestAttackGuestSelftestReportLies(t *testing.T) {
	planned, _ := selftest.Planned(profiles.Defaults(), selftest.Options{Doors: []string{"identity"}})
	if len(planned) < 3 {
		t.Fatalf("identity has %d rows", len(planned))
	}
	var g SelftestReply
	g.Kernel = "6.1.0-\x1b]0;pwned\x07" + strings.Repeat("k", 200)
	g.Report = selftest.Report{Seccomp: "off", Cgroup: "on", Passed: 999}
	for i, r := range planned {
		if i == 1 {
			continue // the open door, left out
		}
		r.Status, r.Happened = selftest.Pass, "held"
		if i == 2 {
			r.Happened = "\x1b[2J" + strings.Repeat("held ", 200_000)
		}
		g.Report.Rows = append(g.Report.Rows, r)
	}
	g.Report.Rows = append(g.Report.Rows, selftest.Row{Door: "identity", Attack: "a door the guest made up", Status: selftest.Pass})
	b, err := json.Marshal(Reply{Selftest: &g})
	if err != nil {
		t.Fatal(err)
	}
	o := replyingVMM(t, b)
	left := watch(&o)
	rep, err := selftestVM(t, o, "identity")
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() || rep.Failed != 1 || rep.Passed != len(planned)-1 || len(rep.Rows) != len(planned) {
		t.Errorf("ok %v, %d passed, %d failed, %d rows of %d planned", rep.OK(), rep.Passed, rep.Failed, len(rep.Rows), len(planned))
	}
	for i, r := range rep.Rows {
		if r.Door != planned[i].Door || r.Attack != planned[i].Attack {
			t.Errorf("row %d: %s / %s, planned %s / %s", i, r.Door, r.Attack, planned[i].Door, planned[i].Attack)
		}
		if len(r.Happened) > maxHappened || strings.ContainsRune(r.Happened, '\x1b') {
			t.Errorf("row %d: happened of %d bytes, escapes %v", i, len(r.Happened), strings.ContainsRune(r.Happened, '\x1b'))
		}
	}
	if r := rep.Rows[1]; r.Status != selftest.Fail || !strings.Contains(r.Happened, "no row") {
		t.Errorf("the row left out: %s %q", r.Status, r.Happened)
	}
	if !strings.Contains(rep.Error, "1 row(s) the suite does not have") {
		t.Errorf("error %q: want the made-up row said", rep.Error)
	}
	if rep.Seccomp != "python" || rep.Isolation != "vm" || len(rep.Kernel) > maxKernel || strings.ContainsAny(rep.Kernel, "\x1b\x07") {
		t.Errorf("seccomp %q isolation %q kernel %q", rep.Seccomp, rep.Isolation, rep.Kernel)
	}
	left.check(t)
}

// A guest whose selftest report is larger than the bound (valid JSON,
// padded): the host refuses it without reading it whole.
func TestAttackGuestSelftestReportTooBig(t *testing.T) {
	planned, _ := selftest.Planned(profiles.Defaults(), selftest.Options{Doors: []string{"identity"}})
	g := SelftestReply{Kernel: "6.1.0-fake", Report: selftest.Report{Rows: planned}}
	for i := range g.Report.Rows {
		g.Report.Rows[i].Status = selftest.Pass
	}
	b, err := json.Marshal(Reply{Selftest: &g})
	if err != nil {
		t.Fatal(err)
	}
	b = append(b, strings.Repeat(" ", maxSelftestReply)...)
	o := replyingVMM(t, b)
	left := watch(&o)
	rep, err := selftestVM(t, o, "identity")
	if err == nil || !strings.Contains(err.Error(), "larger than its bound") || len(rep.Rows) != 0 {
		t.Fatalf("err %v, %d rows", err, len(rep.Rows))
	}
	left.check(t)
}

// `stockade selftest --isolation vm` runs every door in one guest: the
// report has the jail tier's shape, says it ran in the VM tier under the
// guest's kernel, and every door held there; the resource attacks end with
// the verdicts the jail tier gives them on the host (a fork bomb and a
// thread bomb: pids; a memory bomb: memory).
func TestVMSelftest(t *testing.T) {
	o := needVM(t)
	env := append(os.Environ(), KernelEnv+"="+o.Kernel, CacheEnv+"="+o.Cache)
	cmd := exec.Command(o.Binary, "selftest", "--isolation", "vm", "--vm-emulate", "--json")
	cmd.Env = env
	out := proctest.Run(t, cmd, 40*time.Minute)
	var rep selftest.Report
	if err := json.Unmarshal([]byte(out.Stdout), &rep); err != nil {
		t.Fatalf("exit %d: %v: %s %s %s", out.Code(), err, out.Stdout, out.Stderr, out.Overstayed())
	}
	for _, r := range rep.Rows {
		t.Logf("%s %s / %s: %s", r.Status, r.Door, r.Attack, r.Happened)
		if r.Status == selftest.Fail {
			t.Errorf("in the guest, %s / %s failed: %s\n%s", r.Door, r.Attack, r.Happened, r.Output)
		}
	}
	if out.Code() != 0 || !rep.OK() || rep.Error != "" {
		t.Errorf("exit %d, error %q, %d passed, %d failed; stderr %s", out.Code(), rep.Error, rep.Passed, rep.Failed, out.Stderr)
	}
	release := strings.TrimPrefix(filepath.Base(filepath.Dir(o.Kernel)), "linux-image-")
	if rep.Isolation != "vm" || !strings.HasPrefix(release, rep.Kernel) || rep.Kernel == "" {
		t.Errorf("isolation %q, kernel %q: want vm and the guest's %s", rep.Isolation, rep.Kernel, release)
	}
	planned, _ := selftest.Planned(profiles.Defaults(), selftest.Options{})
	if len(rep.Rows) != len(planned) {
		t.Fatalf("%d rows, %d planned", len(rep.Rows), len(planned))
	}
	held := map[string]int{}
	for _, r := range rep.Rows {
		if r.Status == selftest.Pass {
			held[r.Door]++
		}
	}
	for _, d := range selftest.Doors() {
		if held[d] == 0 {
			t.Errorf("door %s: no attack held in the guest", d)
		}
	}

	// The jail tier's resource rows on the host: the same verdicts.
	jr := proctest.Run(t, exec.Command(o.Binary, "selftest", "--door", "resources", "--json"), 10*time.Minute)
	var jail selftest.Report
	if err := json.Unmarshal([]byte(jr.Stdout), &jail); err != nil {
		t.Fatalf("the jail tier: exit %d: %v: %s %s", jr.Code(), err, jr.Stderr, jr.Overstayed())
	}
	for _, name := range []string{"fork bomb (bounded at 400)", "thread bomb (bounded at 400)", "memory bomb (bounded at 1024M)"} {
		vm, jl := rep.Row(name), jail.Row(name)
		if vm == nil || jl == nil {
			t.Errorf("%s: no row (vm %v, jail %v)", name, vm != nil, jl != nil)
			continue
		}
		if v, j := verdictOf(vm.Happened), verdictOf(jl.Happened); v == "" || v != j || vm.Status != selftest.Pass {
			t.Errorf("%s: vm %s %q, jail %s %q", name, vm.Status, vm.Happened, jl.Status, jl.Happened)
		}
	}
	if r := rep.Row("fork bomb (bounded at 400)"); r != nil {
		var peak int
		if i := strings.Index(r.Happened, "pids peak "); i < 0 {
			t.Errorf("fork bomb: %q says no pids peak", r.Happened)
		} else if fmt.Sscan(r.Happened[i+len("pids peak "):], &peak); peak == 0 || peak > 32 {
			t.Errorf("fork bomb: pids peak %d, want up to the suite's limit of 32", peak)
		}
	}
}

// verdictOf is the verdict a resource row's "happened" starts with.
func verdictOf(happened string) string {
	f := strings.Fields(happened)
	if len(f) < 2 || f[0] != "verdict" {
		return ""
	}
	return f[1]
}

// TestAttackGuestSelftestForgedPass: an attack of the suite that escaped
// the guest's jail holds the guest (root in it), which is exactly what
// the suite is there to find; it can then write the whole reply to the
// control port before the guest's init does: every planned row, each a
// PASS. The host holds the report to the suite's rows and bounds, but a
// PASS is the guest's word: it prints the door as held.
func TestAttackGuestSelftestForgedPass(t *testing.T) {
	t.Skip("finding (rev32, open): the VM tier's selftest rows are the guest's word; an attack that escaped the guest's jail can forge an all-PASS report, and the host prints it as every door held (docs/selftest.md says so; no host-side check can tell)")
	planned, _ := selftest.Planned(profiles.Defaults(), selftest.Options{Doors: []string{"identity"}})
	var g SelftestReply
	g.Kernel = "6.1.0"
	for _, r := range planned {
		r.Status, r.Happened = selftest.Pass, "held"
		g.Report.Rows = append(g.Report.Rows, r)
	}
	b, err := json.Marshal(Reply{Selftest: &g})
	if err != nil {
		t.Fatal(err)
	}
	o := replyingVMM(t, b)
	left := watch(&o)
	rep, err := selftestVM(t, o, "identity")
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() {
		t.Errorf("a forged report of %d rows, all PASS, passed: nothing the host measured", len(rep.Rows))
	}
	left.check(t)
}
