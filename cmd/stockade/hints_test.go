package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stockade/stockade/jail"
)

// A hint only when it is sure: the jail's fresh /work, python's own
// "can't open file" with exit 2, and that file in the caller's directory.
func TestMissingScriptHintOnlyWhenSure(t *testing.T) {
	cwd := filepath.Join(t.TempDir(), "it's here")
	os.MkdirAll(filepath.Join(cwd, "sub"), 0o755)
	os.WriteFile(filepath.Join(cwd, "task.py"), nil, 0o644)
	os.WriteFile(filepath.Join(cwd, "sub", "job.py"), nil, 0o644)
	msg := func(p string) string {
		return "python3: can't open file '" + p + "': [Errno 2] No such file or directory\n"
	}
	res := func(code int, stderr string) *jail.Result {
		return &jail.Result{Verdict: jail.VerdictExit, ExitCode: code, Stderr: stderr}
	}
	for _, c := range []struct {
		name string
		spec jail.Spec
		res  *jail.Result
		cwd  string
		want string
	}{
		{"here", jail.Spec{}, res(2, msg("/work/task.py")), cwd, "`stockade python task.py`"},
		{"below", jail.Spec{}, res(2, "Traceback\n"+msg("/work/sub/job.py")), cwd, "`stockade python sub/job.py`"},
		{"quoted", jail.Spec{}, res(2, msg("/work/task.py")), cwd, "--ro '" + strings.ReplaceAll(cwd, "'", `'\''`) + "':/src"},
		{"not here", jail.Spec{}, res(2, msg("/work/other.py")), cwd, ""},
		{"a directory", jail.Spec{}, res(2, msg("/work/sub")), cwd, ""},
		{"outside /work", jail.Spec{}, res(2, msg("/tmp/task.py")), cwd, ""},
		{"with --workdir", jail.Spec{Workdir: "/srv/w"}, res(2, msg("/work/task.py")), cwd, ""},
		{"exit 1", jail.Spec{}, res(1, msg("/work/task.py")), cwd, ""},
		{"no cwd", jail.Spec{}, res(2, msg("/work/task.py")), "", ""},
		{"leaves the directory", jail.Spec{}, res(2, msg("/work/sub"+strings.Repeat("/..", 40)+"/etc/passwd")), cwd, ""},
		{"escape sequences", jail.Spec{}, res(2, msg("/work/\x1b[2J/../task.py")), cwd, ""},
		{"not UTF-8", jail.Spec{}, res(2, msg("/work/\x9b2J/../task.py")), cwd, ""},
	} {
		got := strings.Join(hints(c.spec, c.res, c.cwd), "\n")
		if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
			t.Errorf("%s: hints %q, want %q", c.name, got, c.want)
		}
	}
}
