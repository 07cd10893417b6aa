package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/proctest"
)

// A node numbers the tenants it serves from 2^31 (the audit log's uid):
// a local caller of uid 2^31 on its unix socket shared the first tenant's
// owner, and saw its sessions (and the tenant the caller's). Owners are
// typed: a uid is never a tenant, whatever the numbers.
func TestAttackLocalUIDIsNotATenant(t *testing.T) {
	f := newFixture(t, 1)
	h := f.hosts[0]
	os.Chmod(filepath.Dir(f.dir), 0o755) // the socket's path, for a caller of another uid
	f.startNode(h, "--group", "nogroup")
	ctx, cancel := context.WithTimeout(context.Background(), proctest.Budget(t, 2*time.Minute))
	defer cancel()
	const localUID = 1 << 31 // the number of the node's first tenant
	sock := filepath.Join(h.dir, "s.sock")
	local := func(method, path, body string) (int, string) {
		args := []string{"-s", "-o", "-", "-w", "\n%{http_code}", "--unix-socket", sock, "-X", method}
		if body != "" {
			args = append(args, "-d", body)
		}
		cmd := exec.CommandContext(ctx, "curl", append(args, "http://x"+path)...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: localUID, Gid: 65534}}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("curl as uid %d: %v %s", uint32(localUID), err, out)
		}
		i := bytes.LastIndexByte(out, '\n')
		var code int
		fmt.Sscan(string(out[i+1:]), &code)
		return code, string(out[:i])
	}
	// The node's first tenant makes a session; the local uid of its
	// number asks for it.
	tid, _ := f.newSession(ctx, "tenant-a")
	f.do(ctx, "tenant-a", "", "POST", "/v1/sessions/"+tid+"/exec", map[string]any{"code": "secret = 'tenant-a only'"})
	if code, body := local("POST", "/v1/sessions/"+tid+"/exec", `{"code": "print(secret)"}`); code != 404 || strings.Contains(body, "tenant-a only") {
		t.Errorf("uid %d execs in tenant-a's session: %d %s, want 404", uint32(localUID), code, body)
	}
	if code, body := local("GET", "/v1/sessions", ""); code != 200 || strings.Contains(body, tid) {
		t.Errorf("uid %d lists: %d %s, want 200 without tenant-a's session", uint32(localUID), code, body)
	}
	// The reverse: the local uid's session, asked for by the tenant at
	// its node (as a gateway asks, past the gateway's own record).
	code, body := local("POST", "/v1/sessions", `{}`)
	var made struct {
		ID string `json:"session_id"`
	}
	if code != 201 || json.Unmarshal([]byte(body), &made) != nil || made.ID == "" {
		t.Fatalf("uid %d makes a session: %d %s", uint32(localUID), code, body)
	}
	asTenant := func(method, path string) reply {
		data, _ := json.Marshal(call{Tenant: "tenant-a", Method: method, Path: path})
		m, err := f.g.nc.RequestWithContext(ctx, NodeSubject(h.name), data)
		if err != nil {
			t.Fatalf("tenant-a's %s %s at the node: %v", method, path, err)
		}
		var rp reply
		json.Unmarshal(m.Data, &rp)
		return rp
	}
	if rp := asTenant("GET", "/v1/sessions/"+made.ID); rp.Status != 404 {
		t.Errorf("tenant-a reads uid %d's session: %d %s, want 404", uint32(localUID), rp.Status, rp.Body)
	}
	if rp := asTenant("GET", "/v1/sessions"); rp.Status != 200 || bytes.Contains(rp.Body, []byte(made.ID)) || !bytes.Contains(rp.Body, []byte(tid)) {
		t.Errorf("tenant-a lists: %d %s, want its own session and not uid %d's", rp.Status, rp.Body, uint32(localUID))
	}
}
