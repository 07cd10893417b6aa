package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/api"
	"github.com/stockade/stockade/client"
	"github.com/stockade/stockade/internal/clitest"
	"github.com/stockade/stockade/internal/testenv"
)

// serverClient is a client of the server on sock.
func serverClient(t *testing.T, sock string) *client.Client {
	t.Helper()
	c, err := client.New(sock, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// runOn runs req on the server on sock, within the test's deadline.
func runOn(t *testing.T, sock string, req *api.RunRequest) (*api.RunResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return serverClient(t, sock).Run(ctx, req)
}

// waitPool waits until every pool of the server on sock is full, so that
// the next request is served by a pooled jail.
func waitPool(t *testing.T, sock string) {
	t.Helper()
	c := serverClient(t, sock)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		h, err := c.Health(ctx)
		cancel()
		if err == nil {
			full := len(h.Pool) > 0
			for _, p := range h.Pool {
				full = full && p.Ready >= p.Target
			}
			if full {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("the server's pool did not fill in 30s")
}

// TestRemoteRunSaysEnforcedTimeout: `stockade run --server --timeout 1s`
// was served by a pooled jail and stopped at 1 s, but printed "timeout:
// killed after 10s", the profile's timeout, which the result carried.
func TestRemoteRunSaysEnforcedTimeout(t *testing.T) {
	testenv.NeedJail(t)
	sock := startServeWith(t, "--pool", "1")
	waitPool(t, sock)
	start := time.Now()
	code, _, errs := clitest.RunExit(t, stockadeIn(t, "", "run", "--server", sock, "--timeout", "1s", "--", "sleep", "30"))
	if code != 124 || time.Since(start) > 8*time.Second {
		t.Fatalf("exit %d after %v, stderr %q: not stopped at the 1s timeout", code, time.Since(start), errs)
	}
	if !strings.Contains(errs, "timeout: killed after 1s") {
		t.Errorf("stderr %q: want \"timeout: killed after 1s\"", errs)
	}
}

// TestBadLimitSameMessageFromFlagFileAndRequest: a limit has one door, the
// profile's Validate, so the same bad value gets the same words whether
// it came from a flag, a profile file or a server request's field, each
// naming where it came from.
func TestBadLimitSameMessageFromFlagFileAndRequest(t *testing.T) {
	testenv.NeedJail(t)
	sock := startServe(t)
	file := filepath.Join(t.TempDir(), "tiny.toml")
	for _, c := range []struct {
		flag, key, toml, json, msg string
	}{
		{"memory", "memory", `"1"`, `"1"`, "1 is below the minimum of 4M (a missing unit?)"},
		{"pids", "pids", "1", "1", "1 is not in [16, 4194304]"},
		{"cpus", "cpus", "0.0001", "0.0001", "0.0001 is not in [0.01, 1024]"},
		{"timeout", "timeout", `"0s"`, `"0s"`, "must be more than 0"},
	} {
		code, _, errs := invoke(t, "", "run", "--"+c.flag, strings.Trim(c.json, `"`), "--", "true")
		if want := "stockade: --" + c.flag + ": " + c.msg; code != 125 || !strings.Contains(errs, want) {
			t.Errorf("flag --%s: exit %d, stderr %q, want 125 and %q", c.flag, code, errs, want)
		}
		if err := os.WriteFile(file, []byte("[limits]\n"+c.key+" = "+c.toml+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		code, _, errs = invoke(t, "", "run", "--profile", file, "--", "true")
		if want := file + ":2: limits." + c.key + ": " + c.msg; code != 125 || !strings.Contains(errs, want) {
			t.Errorf("file: exit %d, stderr %q, want 125 and %q", code, errs, want)
		}
		_, err := runOn(t, sock, &api.RunRequest{Argv: []string{"true"}, Limits: api.Limits{c.key: json.RawMessage(c.json)}})
		var e *client.Error
		if want := "request: limits." + c.key + ": " + c.msg; !errors.As(err, &e) || e.Status != 422 || e.Body.Msg != want {
			t.Errorf("request: %v, want 422 and %q", err, want)
		}
	}
}
