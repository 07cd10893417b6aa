package hostenv

import (
	"os"
	"path/filepath"
	"testing"
)

func TestReadIDMapParsesTheKernelsFormat(t *testing.T) {
	p := filepath.Join(t.TempDir(), "uid_map")
	os.WriteFile(p, []byte("         0       1000          1\n         1     100000      65536\n"), 0o644)
	m, err := ReadIDMap(p)
	if err != nil || len(m) != 2 || m[0] != (IDRange{Inside: 0, Outside: 1000, Count: 1}) || m[1] != (IDRange{Inside: 1, Outside: 100000, Count: 65536}) {
		t.Fatalf("got %v, %v", m, err)
	}
	os.WriteFile(p, []byte("0 x 1\n"), 0o644)
	if _, err := ReadIDMap(p); err == nil {
		t.Fatal("a bad line was accepted")
	}
	self, err := ReadIDMap("/proc/self/uid_map")
	if err != nil || len(self) == 0 {
		t.Fatalf("own uid_map: %v, %v", self, err)
	}
}
