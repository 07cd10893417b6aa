package server

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// readBytes is what this process has read so far (/proc/self/io's rchar:
// every read(2), whatever it read from).
func readBytes(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		t.Skipf("/proc/self/io: %v", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "rchar: "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Skip("/proc/self/io has no rchar")
	return 0
}

// TestAttackCollectReadsHardlinks: a run leaves one file just under
// --files-max linked under thousands of names (a link costs no disk and no
// inode), past the file count cap in /work or as non-PNG "figures". The
// collection read each name whole before it dropped it (over the count
// cap, or not a PNG), so a 0.5 s run cost the server 70 GB of reads and
// its run slot for minutes. What it reads is held to the cap it returns.
func TestAttackCollectReadsHardlinks(t *testing.T) {
	const big, links = 1 << 20, 40
	for _, c := range []struct{ name, dir string }{{"past the file count cap", "z"}, {"non-PNG figures", figureDir}} {
		t.Run(c.name, func(t *testing.T) {
			work := t.TempDir()
			for i := range 3 {
				if err := os.WriteFile(filepath.Join(work, fmt.Sprintf("a%d", i)), []byte("x"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(work, "big"), bytes.Repeat([]byte("y"), big-4096), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(filepath.Join(work, c.dir), 0o755); err != nil {
				t.Fatal(err)
			}
			for i := range links {
				if err := os.Link(filepath.Join(work, "big"), filepath.Join(work, c.dir, fmt.Sprintf("%03d.png", i))); err != nil {
					t.Fatal(err)
				}
			}
			before := readBytes(t)
			col, err := collectWork(work, nil, collectLimits{MaxBytes: big, MaxFiles: 3, MaxDepth: 32, MaxEntries: 10000})
			read := readBytes(t) - before
			if err != nil {
				t.Fatal(err)
			}
			if len(col.images) != 0 {
				t.Errorf("%d images from files that are not PNG", len(col.images))
			}
			if read > 4*big {
				t.Errorf("the collection read %d MiB for a %d MiB cap (%d links to one file)", read>>20, big>>20, links)
			}
		})
	}
}
