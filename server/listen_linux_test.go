package server

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/api"
)

// A socket path longer than a unix socket address holds (sun_path is 108
// bytes with its NUL) was bound under a short temporary name and renamed
// into place: the server said "listening", and no client could ever
// connect. It is refused at start, with the limit; a path of exactly 107
// bytes is served.
func TestServeSocketPathLongerThanSunPath(t *testing.T) {
	bin := needServer(t)
	dir := socketDir(t)
	at := func(n int) string {
		p := filepath.Join(dir, strings.Repeat("s", n-len(dir)-1))
		if len(p) != n {
			t.Fatalf("path of %d bytes, want %d", len(p), n)
		}
		return p
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "serve", "--pool", "0", "--socket", at(108)).CombinedOutput()
	if ctx.Err() != nil || err == nil || !strings.Contains(string(out), "107") {
		t.Errorf("serve on a 108-byte socket path: %v, %s (want refused, naming the 107-byte limit)", err, out)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("a refused socket path left %v", ents)
	}
	s := startServerAt(t, bin, at(107), "--pool", "0")
	if r := s.run(api.RunRequest{Code: code("print(107)")}); r.Stdout != "107\n" {
		t.Errorf("a 107-byte socket path: %+v", r)
	}
}
