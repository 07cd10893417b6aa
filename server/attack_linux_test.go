package server

import (
	"encoding/json"
	"fmt"
	"testing"
)

// The jail leaves thousands of symlinks (or empty files past the file
// count cap) deep below /work, each with a long path. collectWork lists
// every one in files_skipped with no bound, so the server holds and sends
// back a response many times --files-max for a few MB of the jail's disk:
// a memory and CPU amplification outside any jail's cgroup.
func TestAttackUnboundedFilesSkipped(t *testing.T) {
	s := startServer(t, "--pool", "0", "--files-max", "1M")
	const n = 4000
	code, _, body := s.post(RunRequest{Code: code(fmt.Sprintf(`import os
for i in range(14):
    os.mkdir('D' * 250); os.chdir('D' * 250)
for i in range(%d):
    os.symlink('x', 'L%%07d' %% i + 'y' * 200)
`, n))})
	if code != 200 {
		t.Fatalf("POST: %d %.300s", code, body)
	}
	var r RunResponse
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	t.Logf("%.600s", r.Stderr); t.Logf("verdict %s, %d skipped entries, response %d bytes (--files-max 1M)", r.Verdict, len(r.FilesSkipped), len(body))
	if len(body) > 4<<20 {
		t.Errorf("the response is %d bytes for --files-max 1M: files_skipped (%d entries) is unbounded", len(body), len(r.FilesSkipped))
	}
}
