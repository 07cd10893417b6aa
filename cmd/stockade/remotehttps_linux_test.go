package main

import (
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stockade/stockade/api"
	"github.com/stockade/stockade/internal/clitest"
)

// `run --server https://...` reaches a gateway with the token from
// $STOCKADE_TOKEN and the CA of --ca-file, streams the output and exits
// as the result says; a gateway's refusal is stockade's own error (125).
// The gateway here is a handler that wants the token, no root needed.
func TestRemoteRunOverHTTPSWithToken(t *testing.T) {
	var got api.RunRequest
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok-123" {
			w.WriteHeader(401)
			json.NewEncoder(w).Encode(api.Error{Msg: "a bearer token is needed"})
			return
		}
		json.NewDecoder(r.Body).Decode(&got)
		w.Header().Set("Content-Type", api.NDJSON)
		enc := json.NewEncoder(w)
		enc.Encode(api.StreamLine{Type: api.StreamStdout, Data: "from the gateway\n"})
		enc.Encode(api.RunResponse{Type: api.StreamResult, Result: &api.Result{Verdict: api.VerdictExit, ExitCode: 7}})
	}))
	defer srv.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := stockadeIn(t, "", "run", "--server", srv.URL, "--ca-file", ca, "--memory", "64M", "--", "echo", "hi")
	cmd.Env = append(cmd.Env, "STOCKADE_TOKEN=tok-123")
	code, out, errs := clitest.RunExit(t, cmd)
	if code != 7 || out != "from the gateway\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if strings.Join(got.Argv, " ") != "echo hi" || got.Limits["memory"] == nil {
		t.Fatalf("the gateway got %+v", got)
	}
	cmd = stockadeIn(t, "", "run", "--server", srv.URL, "--ca-file", ca, "--token", "wrong", "--", "true")
	if code, _, errs := clitest.RunExit(t, cmd); code != 125 || !strings.Contains(errs, "401") || !strings.Contains(errs, "a bearer token is needed") {
		t.Fatalf("a wrong token: exit %d, stderr %q", code, errs)
	}
	cmd = stockadeIn(t, "", "run", "--server", "http://"+srv.Listener.Addr().String(), "--", "true")
	if code, _, errs := clitest.RunExit(t, cmd); code != 125 || !strings.Contains(errs, "https://") {
		t.Fatalf("plain http: exit %d, stderr %q", code, errs)
	}
}
