package server

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stockade/stockade/api"
)

// The jail names two files \xfe and \xff. JSON text is UTF-8, and the
// encoder turned both names into U+FFFD: the answer carried one key twice,
// a decoder kept one of the files, and files_skipped said nothing of the
// other. Each comes back under its own key, the bytes that are not UTF-8
// written as Python's surrogateescape does (\udcfe): os.fsencode gives the
// name back. A file really named U+FFFD keeps its own key.
func TestServeNonUTF8FileNamesCollide(t *testing.T) {
	s := startServer(t, "--pool", "0")
	code, _, body := s.post(api.RunRequest{Code: code(`import os
for name, data in ((b'\xfe', b'1'), (b'\xff', b'2'), ('\ufffd'.encode(), b'3'), (b'caf\xc3\xa9-\xe9', b'4')):
    open(name, 'wb').write(data)
os.mkdir(b'd\xff')
open(b'd\xff/x', 'wb').write(b'5')
os.symlink('x', b'l\xfe')
`)})
	if code != 200 {
		t.Fatalf("POST: %d %.300s", code, body)
	}
	for _, want := range []string{`"\udcfe":"MQ=="`, `"\udcff":"Mg=="`, `"�":"Mw=="`, `"café-\udce9":"NA=="`, `"d\udcff/x":"NQ=="`, `"l\udcfe: a symlink (not followed)"`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("the answer has no %s: %.600s", want, body)
		}
	}
	// A client that reads names as Python does gets every file back under
	// its own name.
	py := exec.Command("python3", "-c", `import json, os, sys
r = json.loads(sys.stdin.read())
print(sorted((os.fsencode(n), v) for n, v in r["files"].items()))`)
	py.Stdin = strings.NewReader(string(body))
	out, err := py.CombinedOutput()
	want := `[(b'caf\xc3\xa9-\xe9', 'NA=='), (b'd\xff/x', 'NQ=='), (b'\xef\xbf\xbd', 'Mw=='), (b'\xfe', 'MQ=='), (b'\xff', 'Mg==')]`
	if err != nil || strings.TrimSpace(string(out)) != want {
		t.Errorf("python3 reads the files as %s (%v), want %s", out, err, want)
	}
}
