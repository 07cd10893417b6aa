package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// `stockade gateway` never starts without TLS: no --cert or --key is a
// refusal before anything listens, as is a tenants file others can read.
func TestAttackGatewayCommandRefusesPlain(t *testing.T) {
	dir := t.TempDir()
	tenants := filepath.Join(dir, "tenants.toml")
	if err := os.WriteFile(tenants, []byte("[tenant.a]\ntokens = [\""+strings.Repeat("t", 40)+"\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no cert or key", []string{"--tenants", tenants}, "HTTPS only"},
		{"no key", []string{"--tenants", tenants, "--cert", "/etc/hostname"}, "HTTPS only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			args := append([]string{"stockade", "gateway", "--listen", "127.0.0.1:0", "--cluster", "/nonexistent"}, tc.args...)
			if code := realMain(context.Background(), args, os.Stdin, &bytes.Buffer{}, &stderr); code == 0 || !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("exit %d, stderr %q; want a refusal naming %q", code, stderr.String(), tc.want)
			}
			if strings.Contains(stderr.String(), "serving") {
				t.Fatal("it served")
			}
		})
	}
}
