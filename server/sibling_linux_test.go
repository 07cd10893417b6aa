package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stockade/stockade/api"
	"github.com/stockade/stockade/internal/clitest"
)

// jailGroups lists the jails' cgroups a server in memory cgroup dir made
// there.
func jailGroups(dir string) []string {
	var out []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), "stockade.") {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out
}

// Two servers in sibling memory cgroups (two services' units), each with
// a session; one is SIGKILLed in the middle of an exec. The other's
// session keeps its state and answers, and nothing of its (run
// directories, cgroups) is touched, neither by the kill nor by the sweep
// of the next server started in the killed one's cgroup, which removes
// everything the killed one left.
func TestServeKill9MidExecLeavesSiblingServerWhole(t *testing.T) {
	bin := needServer(t)
	mem := clitest.OwnV1MemoryCgroup(t, "needs a cgroup v1 memory hierarchy (the VM covers v2)")
	var dirs [2]string
	for i := range dirs {
		dirs[i] = clitest.MakeV1Cgroups(t, filepath.Join(mem, fmt.Sprintf("stockadetest-%d-sib%d", os.Getpid(), i)), []string{"memory"}, nil)[0]
	}
	sockDir := socketDir(t)
	start := func(i int) *testServer {
		sock := filepath.Join(sockDir, fmt.Sprintf("s%d.sock", i))
		cmd := exec.Command("sh", "-c", `echo $$ > "$1/cgroup.procs" && exec "$2" serve --socket "$3" --pool 1 --concurrency 2`, "sh", dirs[i], bin, sock)
		return startServerCmd(t, sock, cmd)
	}
	a, b := start(0), start(1)
	sa, sb := a.session(api.SessionRequest{}), b.session(api.SessionRequest{})
	if r := b.cell(sb.SessionID, "x = 41"); r.Verdict != "ok" {
		t.Fatalf("b's first cell: %+v", r)
	}
	if r := a.cell(sa.SessionID, "y = 1"); r.Verdict != "ok" {
		t.Fatalf("a's first cell: %+v", r)
	}
	bGroups := jailGroups(dirs[1])
	bEntries := leftovers(b.cmd.Process.Pid, b.before)
	if len(bGroups) == 0 || len(bEntries) == 0 {
		t.Fatalf("b has no jail cgroup in %s (%v) or no run directory (%v)", dirs[1], bGroups, bEntries)
	}
	// A's exec: it writes, then sleeps until the kill.
	started := make(chan struct{})
	go func() {
		body, _ := json.Marshal(api.ExecRequest{Code: ptr("open('/work/mark', 'w').write('a'); print('begun', flush=True); import time; time.sleep(60)")})
		close(started)
		if resp, err := a.hc.Post("http://stockade/v1/sessions/"+sa.SessionID+"/exec", "application/json", bytes.NewReader(body)); err == nil {
			resp.Body.Close()
		}
	}()
	<-started
	eventually(t, "a's exec under way", func() bool {
		var in api.SessionInfo
		return a.get("/v1/sessions/"+sa.SessionID, &in) == 200 && in.Busy
	})
	aPid := a.cmd.Process.Pid
	a.cmd.Process.Kill()
	<-a.exited
	if !slicesHasPid(jailGroups(dirs[0]), aPid) {
		t.Log("the killed server left no jail cgroup (the sweep then proves little)")
	}

	if r := b.cell(sb.SessionID, "print(x + 1)"); r.Verdict != "ok" || r.Stdout != "42\n" {
		t.Fatalf("b's session after its neighbour's SIGKILL: %+v", r)
	}
	a2 := start(0)
	eventually(t, "the killed server's leftovers swept", func() bool {
		return len(leftovers(aPid, a.before)) == 0 && !slicesHasPid(jailGroups(dirs[0]), aPid)
	})
	for _, g := range bGroups {
		if _, err := os.Stat(g); err != nil {
			t.Errorf("b's jail cgroup %s after the sweep next door: %v", g, err)
		}
	}
	if now := leftovers(b.cmd.Process.Pid, b.before); len(now) < len(bEntries) {
		t.Errorf("b's entries before the sweep next door %v, after %v", bEntries, now)
	}
	if r := b.cell(sb.SessionID, "print(x + 2)"); r.Verdict != "ok" || r.Stdout != "43\n" {
		t.Fatalf("b's session after the sweep next door: %+v", r)
	}
	if r := a2.run(api.RunRequest{Code: code("print(1)")}); r.Verdict != "ok" {
		t.Errorf("the next server in the killed one's cgroup: %+v", r)
	}
}

// slicesHasPid says whether one of the names is of a run of pid.
func slicesHasPid(names []string, pid int) bool {
	mark := fmt.Sprintf("-%d-", pid)
	for _, n := range names {
		if strings.Contains(filepath.Base(n), mark) {
			return true
		}
	}
	return false
}
