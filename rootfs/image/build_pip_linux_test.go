package image

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPipEntriesAreNamesOrWheelFiles(t *testing.T) {
	wheel := filepath.Join(t.TempDir(), "tiny-1.0-py3-none-any.whl")
	if err := os.WriteFile(wheel, []byte("PK"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, ok := range []string{"requests", "numpy==1.26.4", "scikit-learn", "zope.interface", wheel} {
		if err := checkPip(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	// Nothing pip would take as an option, a URL, a file of requirements,
	// a version range it resolves against the index, or a relative path.
	for _, bad := range []string{"--index-url=http://evil", "-r", "requests>=2", "git+https://x/y",
		"foo; rm -rf /", "tiny-1.0-py3-none-any.whl", "/no/such/x.whl", "", "a b"} {
		if err := checkPip(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestPipArgs(t *testing.T) {
	got := strings.Join(pipArgs([]string{"/srv/w/tiny-1.0-py3-none-any.whl"}), " ")
	if !strings.Contains(got, "install --no-index ") || !strings.HasSuffix(got, " /tmp/stockade-wheels/tiny-1.0-py3-none-any.whl") ||
		!strings.Contains(got, "--only-binary=:all:") {
		t.Errorf("wheel only: %s", got)
	}
	got = strings.Join(pipArgs([]string{"requests==2.31.0", "/srv/w/tiny-1.0-py3-none-any.whl"}), " ")
	if strings.Contains(got, "--no-index") || !strings.Contains(got, " requests==2.31.0 ") {
		t.Errorf("from the index: %s", got)
	}
	o, err := BuildOptions{Pip: []string{"requests"}, Mirror: "http://deb.debian.org/debian"}.withDefaults()
	if err != nil || strings.Join(o.include(), ",") != "python3,python3-pip" {
		t.Errorf("include with --pip: %v %v", o.include(), err)
	}
	if _, err := (BuildOptions{Pip: []string{"--pre"}}).withDefaults(); err == nil {
		t.Error("an option as a pip package was accepted")
	}
}
