package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stockade/stockade/client"
	"github.com/stockade/stockade/internal/clitest"
)

// TestClientExampleRuns builds the example as any program using the
// client would be built and runs it against a real `stockade serve`
// (STOCKADE_BIN): what it prints is what the server's jails did.
func TestClientExampleRuns(t *testing.T) {
	sock, log := clitest.Serve(t, "--audit-log", "", "--pool", "1")
	bin := filepath.Join(t.TempDir(), "client")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	waitHealthy(t, sock, log)
	cmd := exec.Command(bin)
	cmd.Env = []string{"STOCKADE_SOCKET=" + sock}
	out, err := cmd.CombinedOutput()
	want := "4950\nrun: verdict ok, exit 0\nexec: 42\nanswer.txt: 42\nsession: closed after 2 execs\n"
	if err != nil || string(out) != want {
		b, _ := os.ReadFile(log)
		t.Fatalf("the example: %v, printed %q, want %q\nserver:\n%s", err, out, want, b)
	}
}

// waitHealthy waits, through the client, until the server answers.
func waitHealthy(t *testing.T, sock, log string) {
	c, err := client.New(sock, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		h, err := c.Health(ctx)
		cancel()
		if err == nil && h.Status == "ok" {
			return
		}
	}
	b, _ := os.ReadFile(log)
	t.Fatalf("the server did not answer in 30s:\n%s", b)
}
