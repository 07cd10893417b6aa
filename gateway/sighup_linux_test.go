package gateway

import (
	"errors"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/proctest"
	"github.com/stockade/stockade/internal/testenv"
)

// A SIGHUP that reaches `stockade gateway` while it dials the cluster
// (systemctl reload just after start) must not end it: Go's default for
// an unhandled SIGHUP is the process's end. Here the "cluster" accepts
// and never answers; the gateway gets SIGHUP then, and, the connection
// closed, ends with its own error, not the signal.
func TestGatewaySIGHUPWhileDiallingIsNoDeath(t *testing.T) {
	bin := testenv.NeedBinary(t, "the signal handling is the command's")
	tg := startGateway(t, nil) // its certificate and tenants files
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	clusterFile := writeFile(t, tg.dir, "cluster.json", []byte(`{"urls":["tls://`+l.Addr().String()+`"],"ca":"`+tg.g.cfg.ClientCAFile+`","user":"gateway","password":"pw"}`), 0o600)
	cmd := exec.Command(bin, "gateway", "--listen", "127.0.0.1:0", "--cert", tg.g.cfg.CertFile, "--key", tg.g.cfg.KeyFile,
		"--tenants", tg.g.cfg.TenantsFile, "--cluster", clusterFile, "--audit-log", filepath.Join(tg.dir, "audit.log"))
	var out proctest.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	p, err := proctest.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := l.Accept(); err == nil {
			accepted <- c
		}
	}()
	var conn net.Conn
	select {
	case conn = <-accepted:
	case <-p.Done():
		t.Fatalf("the gateway ended before it dialled:\n%s", out.String())
	case <-time.After(proctest.Budget(t, 30*time.Second)):
		t.Fatalf("the gateway never dialled the cluster:\n%s", out.String())
	}
	if err := p.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	// The signal is delivered before the connection ends: a process it
	// kills is gone within this wait, one that handles it still dials.
	time.Sleep(200 * time.Millisecond)
	conn.Close()
	l.Close()
	o := p.Wait(proctest.Budget(t, 60*time.Second))
	if o.Expired {
		t.Fatalf("the gateway did not end after its cluster went away:\n%s", out.String())
	}
	var ee *exec.ExitError
	if errors.As(o.Err, &ee) {
		if ws := ee.Sys().(syscall.WaitStatus); ws.Signaled() {
			t.Fatalf("the gateway was ended by %v while it dialled the cluster:\n%s", ws.Signal(), out.String())
		}
	}
	if o.Code() != 125 || !strings.Contains(out.String(), "cluster") {
		t.Fatalf("exit %d, want 125 with the cluster's error:\n%s", o.Code(), out.String())
	}
}
