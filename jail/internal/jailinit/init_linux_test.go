package jailinit

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/stockade/stockade/internal/proctest"
	"golang.org/x/sys/unix"
)

// The containment sequence in the order the kernel and the threat model
// require; the test reads the table without running a step.
func TestContainStepsAreInTheRequiredOrder(t *testing.T) {
	var argv0 string
	var pid int
	var names []string
	for _, s := range containSteps(&Config{Args: []string{"x"}}, &argv0, &pid) {
		names = append(names, s.name)
	}
	before := [][2]string{
		{"protect init", "build root"},                                // non-dumpable before anything of the jail's exists
		{"make mounts private", "build root"},                         // no mount may propagate back to the host
		{"build root", "pivot_root"},                                  // the binds need the host's paths
		{"pivot_root", "chdir /work"},                                 // /work of the new root
		{"wait for cgroup placement", "unshare cgroup namespace"},     // rooted at the run's cgroup
		{"unshare cgroup namespace", "limit per-user kernel objects"}, // the limit forbids new namespaces
		{"set rlimits", "drop privileges"},                            // raising a hard limit needs the capability
		{"find command", "drop privileges"},                           // looked up while init can still read the root
		{"drop privileges", "load seccomp"},                           // the filter refuses what the drop needs
		{"load seccomp", "exec"},
		{"close inherited descriptors", "protect init"},          // before anything else, nothing runs with the caller's descriptors
		{"close inherited descriptors", "build root"},            // no step may mount or open through one
		{"drop privileges", "close descriptors above 2 on exec"}, // the last step that could open one without the flag
		{"close descriptors above 2 on exec", "load seccomp"},    // a policy may refuse close_range and reading /proc
		// A time namespace refused fails quietly (TimeNamespaceUsable says
		// no and the payload gets the host's uptime): after the limit on
		// new namespaces (ENOSPC) or the privilege drop (EPERM) it would
		// never be made, and no run would fail to say so.
		{"unshare time namespace", "limit per-user kernel objects"},
		{"unshare time namespace", "drop privileges"},
	}
	proctest.InOrder(t, names, before)
	if names[0] != "close inherited descriptors" {
		t.Errorf("closing what init inherited must be the first step: %v", names)
	}
	// Every step that may open a descriptor comes before the mark; after
	// it only the filter, whose listener the kernel opens close-on-exec.
	if got := names[len(names)-3:]; !slices.Equal(got, []string{"close descriptors above 2 on exec", "load seccomp", "exec"}) {
		t.Errorf("the steps after marking descriptors close-on-exec are %v, want only the filter and the exec", got[1:])
	}
	if names[len(names)-1] != "exec" {
		t.Errorf("exec must be the last step: %v", names)
	}
}

func TestLookPath(t *testing.T) {
	dir := t.TempDir()
	bin, data := filepath.Join(dir, "bin"), filepath.Join(dir, "data")
	for _, d := range []string{bin, data, filepath.Join(data, "tool")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(bin, "tool"), []byte("#!/bin/sh\n"), 0o755)
	os.WriteFile(filepath.Join(bin, "notes"), []byte("x"), 0o644)
	path := []string{data, bin}

	if got, err := lookPath("tool", path); err != nil || got != filepath.Join(bin, "tool") {
		t.Errorf("tool: %q %v (a directory of the name comes first in PATH and must be skipped)", got, err)
	}
	if got, err := lookPath("./rel/x", path); err != nil || got != "./rel/x" {
		t.Errorf("a name with a slash is not looked up: %q %v", got, err)
	}
	for _, name := range []string{"notes", "missing"} {
		_, err := lookPath(name, path)
		var se *SetupError
		if !errors.As(err, &se) || se.ExitCode != ExitNotFound || !strings.Contains(se.Message, "PATH="+data+":"+bin) {
			t.Errorf("%s: %v, want a 127 naming the PATH", name, err)
		}
	}
}

func TestExecErrorStatus(t *testing.T) {
	for _, c := range []struct {
		err  error
		code int
	}{{syscall.ENOENT, ExitNotFound}, {syscall.EACCES, ExitCannotRun}, {syscall.ENOEXEC, ExitCannotRun}} {
		var se *SetupError
		if err := execError("x", c.err); !errors.As(err, &se) || se.ExitCode != c.code || se.Step != "exec" {
			t.Errorf("%v: %v, want exit %d", c.err, err, c.code)
		}
	}
}

func TestSplitDest(t *testing.T) {
	for _, c := range []struct{ in, parent, base string }{
		{"/etc/passwd", "etc", "passwd"}, {"/work", "", "work"}, {"/a/b/c/", "a/b", "c"}, {"/", "", ""},
	} {
		if p, b := splitDest(c.in); p != c.parent || b != c.base {
			t.Errorf("splitDest(%q) = %q, %q", c.in, p, b)
		}
	}
}

// A symlink planted anywhere on a user-named mount source must not be
// followed: the path is refused, with the reason.
func TestAttackSymlinkedMountSource(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	os.Mkdir(real, 0o755)
	os.Symlink("/etc", filepath.Join(dir, "link"))
	fd, err := OpenNoSymlinks(real)
	if err != nil {
		t.Fatalf("real path: %v", err)
	}
	unix.Close(fd)
	for _, p := range []string{filepath.Join(dir, "link"), filepath.Join(dir, "link", "passwd")} {
		if fd, err := OpenNoSymlinks(p); err == nil || !strings.Contains(err.Error(), "symlink") {
			unix.Close(fd)
			t.Errorf("%s: %v, want refused for its symlink", p, err)
		}
	}
	if err := sourceError("/x", unix.EACCES); !strings.Contains(err.Error(), "o+x") || !errors.Is(err, unix.EACCES) {
		t.Errorf("EACCES: %v, want the o+x hint and the cause", err)
	}
}

// A mount target is made below the new root only: neither '..' nor a
// symlink in the plan's path may lead out.
func TestAttackMountTargetOutOfTheRoot(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(rfd)
	os.Symlink(outside, filepath.Join(root, "out"))
	for _, rel := range []string{"/a/../../x", "/out/x"} {
		if fd, err := mkdirAllBeneath(rfd, rel, 0o755); err == nil {
			unix.Close(fd)
			t.Errorf("%s: made, want refused", rel)
		}
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("something was made outside the root: %v", ents)
	}
	fd, err := mkdirAllBeneath(rfd, "/usr/lib/x", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	if fi, err := os.Stat(filepath.Join(root, "usr/lib/x")); err != nil || !fi.IsDir() {
		t.Errorf("usr/lib/x: %v", err)
	}
}

// The protocol is JSON over one datagram (the plan's seccomp program raw
// after it); what the parent sends, init reads back unchanged.
func TestProtocolRoundTrip(t *testing.T) {
	cfg := Config{NewRoot: "/run/x/root", Hostname: "stockade", Args: []string{"python3", "-c", "print(1)"},
		Env: []string{"A=1"}, Path: []string{"/usr/bin"}, Rlimits: []Rlimit{{Resource: 7, Cur: 256, Max: 256}},
		Steps:   []Step{{Kind: StepBind, Dest: "/usr", Source: "/usr", Dir: true, Exec: true}, {Kind: StepTmpfs, Dest: "/tmp", Mode: 0o1777, Size: 64 << 20}},
		Seccomp: "python", SeccompBPF: []byte{1, 2, 3}, SetGroups: true, WaitPlacement: true}
	// A newline inside a string must not end the JSON early.
	cfg.Env = append(cfg.Env, "B=two\nlines")
	b, err := EncodeConfig(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	if back, err := DecodeConfig(b); err != nil || !reflect.DeepEqual(*back, cfg) {
		t.Errorf("config round trip: %+v %v", back, err)
	}
	// The program travels raw after the JSON, not as base64 inside it.
	if bytes.Contains(b, []byte("AQID")) || !bytes.HasSuffix(b, []byte("\n\x01\x02\x03")) {
		t.Errorf("the program is not raw after the JSON: %q", b)
	}
	off := cfg
	off.Seccomp, off.SeccompBPF = "off", nil
	if b, err = EncodeConfig(&off); err != nil {
		t.Fatal(err)
	}
	if back, err := DecodeConfig(b); err != nil || !reflect.DeepEqual(*back, off) {
		t.Errorf("config round trip without a program: %+v %v", back, err)
	}
	if _, err := DecodeConfig([]byte(`{"args":["x"]}`)); err == nil {
		t.Error("DecodeConfig accepted a plan without its newline")
	}
	m, err := DecodeMsg([]byte(`{"t":"error","step":"exec","msg":"x: not found","exit_code":127}`))
	if err != nil || m.Kind != MsgError || m.ExitCode != ExitNotFound || m.Step != "exec" {
		t.Errorf("DecodeMsg: %+v %v", m, err)
	}
	if _, err := DecodeMsg([]byte("not json")); err == nil {
		t.Error("DecodeMsg accepted garbage")
	}
}
