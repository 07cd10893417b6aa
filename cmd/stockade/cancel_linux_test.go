package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/proctest"
	"github.com/stockade/stockade/internal/testenv"
	"github.com/stockade/stockade/jail"
)

// A signal to stockade cancels the run: the jail is killed and removed, and
// the result says cancelled and which signal, never "killed by signal 9"
// (which reads as if the jailed code had been killed for something it did).
func TestSignalToStockadeIsACancel(t *testing.T) {
	testenv.NeedJail(t)
	for _, tc := range []struct {
		sig  syscall.Signal
		json bool
	}{{syscall.SIGTERM, true}, {syscall.SIGINT, false}, {syscall.SIGHUP, true}} {
		t.Run(tc.sig.String(), func(t *testing.T) {
			marker := fmt.Sprintf("stockade-cancel-%d", time.Now().UnixNano())
			args := []string{"run", "--timeout", "60s"}
			if tc.json {
				args = append(args, "--json")
			}
			args = append(args, "--", "python3", "-c", "import time\ntime.sleep(1000)", marker)
			before := runEntries(t)
			cmd := exec.Command("/proc/self/exe", args...)
			cmd.Env = append(os.Environ(), "STOCKADE_TEST_MAIN=1")
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			p, err := proctest.Start(cmd)
			if err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(10 * time.Second)
			for len(procsWith(marker)) < 1 {
				if time.Now().After(deadline) {
					p.Kill()
					t.Fatalf("the jailed process never appeared: stderr %q", p.Stderr())
				}
				time.Sleep(20 * time.Millisecond)
			}
			cmd.Process.Signal(tc.sig)
			if o := p.Wait(proctest.Budget(t, 30*time.Second)); o.Expired {
				t.Fatalf("%v did not end the run: %s", tc.sig, o.Overstayed())
			}
			code := cmd.ProcessState.ExitCode()
			if want := 128 + int(tc.sig); code != want {
				t.Errorf("exit status %d, want %d; stderr %q", code, want, errb.String())
			}
			if left := procsWith(marker); len(left) > 0 {
				t.Errorf("jailed processes outlived the cancel: %v", left)
			}
			name := "stockade got " + map[syscall.Signal]string{syscall.SIGTERM: "SIGTERM", syscall.SIGINT: "SIGINT", syscall.SIGHUP: "SIGHUP"}[tc.sig]
			if tc.json {
				var r jail.Result
				if err := json.Unmarshal(out.Bytes(), &r); err != nil {
					t.Fatalf("result %q: %v", out.String(), err)
				}
				if r.Verdict != jail.VerdictCancelled || r.Signal != nil || r.Error == nil || !strings.Contains(*r.Error, name) {
					t.Errorf("result: verdict %s, signal %v, error %v; want cancelled naming %s", r.Verdict, r.Signal, r.Error, name)
				}
			} else if !strings.Contains(errb.String(), "stockade: cancelled ("+name+")") || strings.Contains(errb.String(), "killed by signal") {
				t.Errorf("stderr %q does not say cancelled by %s", errb.String(), name)
			}
			if left := leftoversOf(t, cmd.Process.Pid, before); len(left) > 0 {
				t.Errorf("a cancelled run left %v", left)
			}
		})
	}
}

// leftoversOf lists what the stockade pid left in the run places that
// was not there before (see runEntries).
func leftoversOf(t *testing.T, pid int, before map[string]bool) []string {
	return leftoversOfAny(t, map[int]bool{pid: true}, before)
}
