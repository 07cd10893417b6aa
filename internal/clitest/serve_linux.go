package clitest

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stockade/stockade/internal/testenv"
)

// Serve starts `stockade serve` (the built binary, STOCKADE_BIN, as root)
// on a socket in a temporary directory, with args after --socket and its
// stderr in a file beside it; cleanup stops it with SIGTERM and waits. It
// returns the socket and the log's path (read it on failure: the server
// writes it until it stops).
func Serve(t *testing.T, args ...string) (sock, log string) {
	t.Helper()
	testenv.NeedRoot(t, "starts real jails")
	bin := testenv.NeedBinary(t, "talks to a real stockade serve")
	dir := t.TempDir()
	sock, log = filepath.Join(dir, "s.sock"), filepath.Join(dir, "serve.log")
	f, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	srv := exec.Command(bin, append([]string{"serve", "--socket", sock}, args...)...)
	srv.Stderr = f
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = srv.Process.Signal(syscall.SIGTERM)
		_ = srv.Wait()
	})
	return sock, log
}
