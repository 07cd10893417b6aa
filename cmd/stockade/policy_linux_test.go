package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/api"
	"github.com/stockade/stockade/internal/clitest"
	"github.com/stockade/stockade/internal/testenv"
)

// unixHTTP is an HTTP client of the server on sock.
func unixHTTP(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
}

// waitPool waits until every pool of the server on sock is full, so that
// the next request is served by a pooled jail.
func waitPool(t *testing.T, sock string) {
	t.Helper()
	hc := unixHTTP(sock)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var h api.Health
		if resp, err := hc.Get("http://stockade/v1/health"); err == nil {
			json.NewDecoder(resp.Body).Decode(&h)
			resp.Body.Close()
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
		resp, err := unixHTTP(sock).Post("http://stockade/v1/run", "application/json",
			strings.NewReader(`{"argv": ["true"], "limits": {"`+c.key+`": `+c.json+`}}`))
		if err != nil {
			t.Fatal(err)
		}
		var e struct{ Error string }
		json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if want := "request: limits." + c.key + ": " + c.msg; resp.StatusCode != 422 || e.Error != want {
			t.Errorf("request: %d %q, want 422 and %q", resp.StatusCode, e.Error, want)
		}
	}
}
