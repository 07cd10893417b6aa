package netnstest

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/testenv"
)

// A listener made in In belongs to the namespace joined, which has only
// its loopback; f's error comes back; the caller's namespace is its own
// after; a namespace that is not there is an error, and f never runs.
func TestIn(t *testing.T) {
	testenv.NeedRoot(t, "joins a network namespace")
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("needs unshare (util-linux)")
	}
	holder := exec.Command("unshare", "--net", "sleep", "60")
	holder.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })
	self, _ := os.Readlink("/proc/self/ns/net")
	ns := "/proc/" + strconv.Itoa(holder.Process.Pid) + "/ns/net"
	for i := 0; ; i++ {
		if l, err := os.Readlink(ns); err == nil && l != self {
			if comm, _ := os.ReadFile("/proc/" + strconv.Itoa(holder.Process.Pid) + "/comm"); string(comm) == "sleep\n" {
				break
			}
		}
		if i == 500 {
			t.Fatal("unshare --net did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	var ifaces []net.Interface
	mine := errors.New("f's own error")
	err := In(ns, func() (err error) {
		ifaces, err = net.Interfaces()
		if err != nil {
			return err
		}
		return mine
	})
	if err != mine {
		t.Fatalf("In: %v, want f's error", err)
	}
	if len(ifaces) != 1 || ifaces[0].Name != "lo" {
		t.Fatalf("interfaces inside: %v, want lo alone", ifaces)
	}
	if l, _ := os.Readlink("/proc/thread-self/ns/net"); l != self {
		t.Fatalf("the caller's thread is in %s after, not %s", l, self)
	}
	ran := false
	if err := In("/nonexistent/ns", func() error { ran = true; return nil }); err == nil || ran {
		t.Fatalf("a missing namespace: %v, f ran %v", err, ran)
	}
}
