package profiles

import (
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
)

// TestAttackCachedBuiltinSharedByConcurrentLoads: the built-in python
// profile is parsed once per process (2b6d4b5). Many goroutines load a
// chain built on it, merge a layer of their own (as flags do) and scribble
// on every slice and map of the result, all at once. Run under -race, any
// memory shared with the cached profile is a data race; afterwards a fresh
// Load and Defaults must equal a fresh parse.
func TestAttackCachedBuiltinSharedByConcurrentLoads(t *testing.T) {
	want, err := Parse("builtin:python.toml", pythonTOML())
	if err != nil {
		t.Fatal(err)
	}
	want.Name = "python"
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "child.toml"), []byte("extends = \"python\"\n[environment]\nvars = { C = \"1\" }\n[filesystem]\nro = [\"/usr\"]\n[network]\nallow = [\"a.example\"]\nallow_private = [\"10.0.0.0/8\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, ref := range []string{"python", "child", "python-strict"} {
				p, err := Load(ref, []string{dir})
				if err != nil {
					t.Error(err)
					return
				}
				layer := &Profile{}
				layer.Environment.Vars = map[string]string{"L": "1"}
				layer.Mark(FieldEnvVars, Origin{File: "--env"})
				layer.Network.Allow = []string{"b.example"}
				layer.Mark(FieldNetworkAllow, Origin{File: "--allow-net"})
				m := Merge(p, layer)
				for _, q := range []*Profile{p, m, Defaults()} {
					q.Limits.Memory = 1
					if q.Environment.Vars == nil {
						q.Environment.Vars = map[string]string{}
					}
					q.Environment.Vars["X"] = "1"
					q.Filesystem.RO = append(q.Filesystem.RO, Bind{Source: "/srv", Dest: "/srv"})
					for j := range q.Filesystem.RO {
						q.Filesystem.RO[j].Source = "/"
					}
					q.Network.Allow = append(q.Network.Allow, "evil.example")
					for j := range q.Network.Allow {
						q.Network.Allow[j] = "*"
					}
					for j := range q.Network.AllowPrivate {
						q.Network.AllowPrivate[j] = "0.0.0.0/0"
					}
					q.Mark(FieldNetworkAllow, Origin{File: "attack"})
				}
			}
		}()
	}
	wg.Wait()
	if got := Defaults(); !reflect.DeepEqual(got, want) {
		t.Errorf("edits reached Defaults:\n%+v\nwant\n%+v", got, want)
	}
	p, err := Load("python", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p.Limits, want.Limits) || !reflect.DeepEqual(p.Environment, want.Environment) || !reflect.DeepEqual(p.Network, want.Network) || len(p.Filesystem.RO) != 0 {
		t.Errorf("edits reached Load: %+v", p)
	}
	c, err := Load("child", []string{dir})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Network.Allow) != 1 || c.Network.Allow[0] != "a.example" || len(c.Filesystem.RO) != 1 || c.Filesystem.RO[0].Source != "/usr" || len(c.Environment.Vars) != 2 {
		t.Errorf("edits reached a child's Load: %+v", c)
	}
}
