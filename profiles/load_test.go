package profiles

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestBuiltins checks the built-ins against the numbers issue 5 gives them,
// and that each sets every field, so that it reads as documentation.
func TestBuiltins(t *testing.T) {
	if got, want := BuiltinNames(), []string{"python", "python-strict", "shell"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("BuiltinNames() = %v, want %v", got, want)
	}
	want := map[string]struct {
		timeout          time.Duration
		memory, tmpfs    int64
		output, pids     int64
		cpus             float64
		workdir, seccomp string
	}{
		"python":        {10 * time.Second, 512 << 20, 64 << 20, 1 << 20, 128, 1, WorkdirFresh, SeccompPython},
		"python-strict": {5 * time.Second, 256 << 20, 16 << 20, 100 << 10, 32, 0.5, WorkdirNone, SeccompStrict},
		"shell":         {10 * time.Second, 512 << 20, 64 << 20, 1 << 20, 128, 1, WorkdirFresh, SeccompPython},
	}
	for _, name := range BuiltinNames() {
		p, err := Builtin(name)
		if err != nil {
			t.Fatalf("Builtin(%q): %v", name, err)
		}
		w := want[name]
		l := p.Limits
		if l.Timeout != w.timeout || l.Memory != w.memory || p.Filesystem.TmpfsSize != w.tmpfs || l.Output != w.output ||
			l.Pids != w.pids || l.CPUs != w.cpus || p.Filesystem.Workdir != w.workdir || p.Seccomp.Policy != w.seccomp ||
			p.Network.Mode != NetworkNone || l.Swap != 0 {
			t.Errorf("%s: %+v", name, p)
		}
		raw, _ := builtins.ReadFile("builtin/" + name + ".toml")
		file, err := Parse(name, raw)
		if err != nil {
			t.Fatal(err)
		}
		if got, all := file.SetFields(), Fields()[1:]; !equalFields(got, all) {
			t.Errorf("%s sets %v, want every field but extends", name, got)
		}
	}
	if _, err := Builtin("./python.toml"); err == nil || err.Error() != `no built-in profile "./python.toml" (there are python, python-strict, shell)` {
		t.Errorf("Builtin of a path: %v", err)
	}
}

func TestDefaultSearchPath(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	tests := []struct {
		env  map[string]string
		want []string
	}{
		{map[string]string{"XDG_CONFIG_HOME": "/x", "HOME": "/h"}, []string{"/x/stockade/profiles", "/etc/stockade/profiles"}},
		{map[string]string{"HOME": "/h"}, []string{"/h/.config/stockade/profiles", "/etc/stockade/profiles"}},
		{map[string]string{"XDG_CONFIG_HOME": "rel", "HOME": "/h"}, []string{"/h/.config/stockade/profiles", "/etc/stockade/profiles"}},
		{map[string]string{}, []string{"/etc/stockade/profiles"}},
	}
	for _, tt := range tests {
		if got := DefaultSearchPath(env(tt.env)); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("DefaultSearchPath(%v) = %v, want %v", tt.env, got, tt.want)
		}
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	user, system := filepath.Join(dir, "user"), filepath.Join(dir, "etc")
	search := []string{user, system}
	writeFile(t, filepath.Join(system, "nightly-agent.toml"), "extends = \"python-strict\"\n[limits]\ntimeout = \"30s\"\n")
	writeFile(t, filepath.Join(user, "nightly-agent.toml"), "extends = \"nightly-agent\"\n[limits]\nmemory = \"1G\"\n")
	writeFile(t, filepath.Join(system, "python.toml"), "extends = \"python\"\n[limits]\npids = 64\n")
	writeFile(t, filepath.Join(dir, "proj", "mine.toml"), "extends = \"base/common.toml\"\n[limits]\ncpus = 2\n")
	writeFile(t, filepath.Join(dir, "proj", "base", "common.toml"), "extends = \"shell\"\n[environment]\nvars = { A = \"1\" }\n")
	writeFile(t, filepath.Join(dir, "no-extends.toml"), "[limits]\nmemory = \"1G\"\n")

	t.Run("name shadows and extends through the search path", func(t *testing.T) {
		p, err := Load("nightly-agent", search)
		if err != nil {
			t.Fatal(err)
		}
		if p.Limits.Memory != 1<<30 || p.Limits.Timeout != 30*time.Second || p.Limits.Pids != 32 || p.Seccomp.Policy != SeccompStrict {
			t.Errorf("%+v", p.Limits)
		}
		if p.Name != "nightly-agent" || p.Extends != "" {
			t.Errorf("name %q extends %q", p.Name, p.Extends)
		}
		if o, _ := p.Origin(FieldMemory); o.File != filepath.Join(user, "nightly-agent.toml") || o.Line != 3 {
			t.Errorf("memory origin %v", o)
		}
		if o, _ := p.Origin(FieldPids); o.String() != "builtin:python-strict.toml:11" {
			t.Errorf("pids origin %v", o)
		}
	})
	t.Run("a file may extend the built-in it shadows", func(t *testing.T) {
		p, err := Load("python", search)
		if err != nil {
			t.Fatal(err)
		}
		if p.Limits.Pids != 64 || p.Limits.Memory != 512<<20 {
			t.Errorf("%+v", p.Limits)
		}
	})
	t.Run("relative extends is relative to the file", func(t *testing.T) {
		p, err := Load(filepath.Join(dir, "proj", "mine.toml"), search)
		if err != nil {
			t.Fatal(err)
		}
		if p.Limits.CPUs != 2 || p.Environment.Vars["A"] != "1" || p.Description != "Agent shell commands: /bin/sh and coreutils, the same isolation as python" {
			t.Errorf("%+v", p)
		}
	})
	t.Run("no extends starts from Defaults", func(t *testing.T) {
		p, err := Load(filepath.Join(dir, "no-extends.toml"), search)
		if err != nil {
			t.Fatal(err)
		}
		want := Defaults()
		want.Limits.Memory = 1 << 30
		if !sameValues(p, want) {
			t.Errorf("%+v", p)
		}
	})
	t.Run("the built-ins without a search path", func(t *testing.T) {
		if _, err := Load("shell", nil); err != nil {
			t.Error(err)
		}
	})
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	search := []string{dir}
	writeFile(t, filepath.Join(dir, "a.toml"), "extends = \"b\"\n")
	writeFile(t, filepath.Join(dir, "b.toml"), "\nextends = \"a\"\n")
	writeFile(t, filepath.Join(dir, "self.toml"), "extends = \"./self.toml\"\n")
	for i := range MaxExtendsDepth + 1 {
		writeFile(t, filepath.Join(dir, "d"+string(rune('0'+i))+".toml"), "extends = \"d"+string(rune('0'+i+1))+"\"\n")
	}
	writeFile(t, filepath.Join(dir, "typo.toml"), "extends = \"pyhton\"\n")
	writeFile(t, filepath.Join(dir, "badname.toml"), "extends = \"..\"\n")
	writeFile(t, filepath.Join(dir, "invalid.toml"), "extends = \"python\"\n[limits]\nmemory = \"1K\"\n")
	writeFile(t, filepath.Join(dir, "syntax.toml"), "[limits\n")
	writeFile(t, filepath.Join(dir, "big.toml"), "# "+strings.Repeat("x", maxProfileSize)+"\n")
	writeFile(t, filepath.Join(dir, "extends-bad.toml"), "extends = \"syntax\"\n")

	tests := []struct {
		ref  string
		want string
	}{
		{"a", dir + "/b.toml:2: extends: profile cycle: " + dir + "/a.toml -> " + dir + "/b.toml -> " + dir + "/a.toml"},
		{dir + "/self.toml", dir + "/self.toml:1: extends: profile cycle: " + dir + "/self.toml -> " + dir + "/self.toml"},
		{"d0", dir + "/d7.toml:1: extends: more than 8 profiles in the chain of extends"},
		{"typo", dir + "/typo.toml:1: extends: profile \"pyhton\" not found: looked in " + dir + "/pyhton.toml, the built-ins (python, python-strict, shell)"},
		{"nope", "profile \"nope\" not found: looked in " + dir + "/nope.toml, the built-ins (python, python-strict, shell)"},
		{"badname", dir + "/badname.toml:1: extends: \"..\" is neither a profile name ([A-Za-z0-9][A-Za-z0-9._-]*) nor a path"},
		{"invalid", dir + "/invalid.toml:3: limits.memory: 1K is below the minimum of 4M (a missing unit?)"},
		{"syntax", dir + "/syntax.toml:2: invalid TOML: expected '.' or ']' to end table name, but got '\\n' instead"},
		{"extends-bad", dir + "/syntax.toml:2: invalid TOML: expected '.' or ']' to end table name, but got '\\n' instead"},
		{"big", "profile " + dir + "/big.toml: larger than 1M"},
		{dir + "/missing.toml", "profile " + dir + "/missing.toml: open " + dir + "/missing.toml: no such file or directory"},
		{dir, "profile " + dir + ": not a regular file"},
		{"/dev/zero", "profile /dev/zero: not a regular file"},
	}
	for _, tt := range tests {
		_, err := Load(tt.ref, search)
		if err == nil || err.Error() != tt.want {
			t.Errorf("Load(%q):\n got %v\nwant %s", tt.ref, err, tt.want)
		}
	}
}

// TestTOMLRoundTrip checks that what `stockade profile show` prints reads
// back as the same policy.
func TestTOMLRoundTrip(t *testing.T) {
	custom := Defaults()
	custom.Name = "custom"
	custom.Description = "quotes \" and \\ and \x01 and é"
	custom.Mark(FieldDescription, Origin{File: "x"})
	custom.Filesystem.RO = []Bind{{"/data/models", "/models"}, {"/srv", "/srv"}}
	custom.Environment.Vars = map[string]string{"A": "1", "weird-name": "x\ty"}
	custom.Limits.CPUs = 2
	custom.Limits.Timeout = 1500 * time.Millisecond
	custom.Limits.Output = 1000
	var profiles []*Profile
	for _, n := range BuiltinNames() {
		p, err := Builtin(n)
		if err != nil {
			t.Fatal(err)
		}
		profiles = append(profiles, p)
	}
	for _, p := range append(profiles, custom) {
		out, err := p.TOML()
		if err != nil {
			t.Fatalf("%s: TOML: %v", p.Name, err)
		}
		back, err := Parse("show.toml", out)
		if err != nil {
			t.Fatalf("%s: reading back:\n%s\n%v", p.Name, out, err)
		}
		if !sameValues(back, p) || !equalFields(back.SetFields(), p.SetFields()) {
			t.Errorf("%s: round trip changed the profile:\n%s\n%+v\n%+v", p.Name, out, back, p)
		}
	}
	out, _ := profiles[0].TOML()
	if !strings.Contains(string(out), "\nmemory = \"512M\" # builtin:python.toml:8\n") {
		t.Errorf("show output lacks the memory line with its origin:\n%s", out)
	}
}

// The built-in python profile is parsed once per process and handed out as
// clones: whatever a caller does to one (a layer of flags merged in place,
// a test's edits) must not reach the next Defaults or Load.
func TestDefaultsAreIndependentCopies(t *testing.T) {
	want, err := Parse("builtin:python.toml", pythonTOML())
	if err != nil {
		t.Fatal(err)
	}
	want.Name = "python"
	if got := Defaults(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Defaults differs from a fresh parse:\n%+v\n%+v", got, want)
	}
	for _, get := range []func() *Profile{Defaults, func() *Profile {
		p, err := Load("python", nil)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}} {
		p := get()
		p.Limits.Memory++
		p.Filesystem.RO = append(p.Filesystem.RO, Bind{Source: "/srv", Dest: "/srv"})
		if p.Environment.Vars == nil {
			p.Environment.Vars = map[string]string{}
		}
		p.Environment.Vars["X"] = "1"
		p.Network.Allow = append(p.Network.Allow[:0:0], "example.org")
		p.Mark(FieldNetworkAllow, Origin{File: "--allow-net"})
	}
	if got := Defaults(); !reflect.DeepEqual(got, want) {
		t.Errorf("a caller's edits reached the next Defaults:\n%+v\nwant\n%+v", got, want)
	}
	p, err := Load("python", nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.Limits.Memory != want.Limits.Memory || len(p.Filesystem.RO) != len(want.Filesystem.RO) || p.IsSet(FieldNetworkAllow) != want.IsSet(FieldNetworkAllow) {
		t.Errorf("a caller's edits reached the next Load: %+v", p)
	}
}
