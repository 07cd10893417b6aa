package profiles

import (
	"reflect"
	"testing"
	"time"
)

func TestMerge(t *testing.T) {
	base := Defaults()
	base.Filesystem.RO = []Bind{{"/a", "/m"}, {"/b", "/n"}}
	base.Environment.Vars = map[string]string{"A": "1", "B": "2"}
	base.Mark(FieldRO, Origin{File: "base.toml", Line: 3})
	base.Mark(FieldEnvVars, Origin{File: "base.toml", Line: 4})

	tests := []struct {
		name  string
		over  func(p *Profile)
		check func(t *testing.T, m *Profile)
	}{
		{"nothing set changes nothing", func(p *Profile) {}, func(t *testing.T, m *Profile) {
			if !sameValues(m, base) {
				t.Errorf("merged %+v, want base %+v", m, base)
			}
		}},
		{"a set field wins and carries its origin", func(p *Profile) {
			p.Limits.Memory = 1 << 30
			p.Mark(FieldMemory, Origin{"over.toml", 9})
		}, func(t *testing.T, m *Profile) {
			if m.Limits.Memory != 1<<30 {
				t.Errorf("memory = %d", m.Limits.Memory)
			}
			if o, _ := m.Origin(FieldMemory); o != (Origin{"over.toml", 9}) {
				t.Errorf("origin = %v", o)
			}
			if m.Limits.Timeout != 10*time.Second {
				t.Errorf("timeout = %v, want the base's", m.Limits.Timeout)
			}
		}},
		{"a set zero wins over the base", func(p *Profile) {
			p.Filesystem.Noexec = false
			p.Mark(FieldNoexec, Origin{"over.toml", 2})
		}, func(t *testing.T, m *Profile) {
			if m.Filesystem.Noexec {
				t.Error("noexec = true, want the over's false")
			}
		}},
		{"an unset zero does not", func(p *Profile) {
			p.Limits.Pids = 0
		}, func(t *testing.T, m *Profile) {
			if m.Limits.Pids != 128 {
				t.Errorf("pids = %d, want 128", m.Limits.Pids)
			}
		}},
		{"vars merge per variable", func(p *Profile) {
			p.Environment.Vars = map[string]string{"B": "two", "C": "3"}
			p.Mark(FieldEnvVars, Origin{"over.toml", 5})
		}, func(t *testing.T, m *Profile) {
			if want := map[string]string{"A": "1", "B": "two", "C": "3"}; !reflect.DeepEqual(m.Environment.Vars, want) {
				t.Errorf("vars = %v, want %v", m.Environment.Vars, want)
			}
		}},
		{"binds merge per destination", func(p *Profile) {
			p.Filesystem.RO = []Bind{{"/c", "/o"}, {"/z", "/m"}}
			p.Mark(FieldRO, Origin{"over.toml", 6})
		}, func(t *testing.T, m *Profile) {
			if want := []Bind{{"/z", "/m"}, {"/b", "/n"}, {"/c", "/o"}}; !reflect.DeepEqual(m.Filesystem.RO, want) {
				t.Errorf("ro = %v, want %v", m.Filesystem.RO, want)
			}
		}},
		{"name and extends are the over's", func(p *Profile) {
			p.Name, p.Extends = "over", "python"
		}, func(t *testing.T, m *Profile) {
			if m.Name != "over" || m.Extends != "python" {
				t.Errorf("name %q extends %q", m.Name, m.Extends)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := base.Clone()
			over := &Profile{}
			tt.over(over)
			overBefore := over.Clone()
			m := Merge(base, over)
			tt.check(t, m)
			if !reflect.DeepEqual(base, before) || !reflect.DeepEqual(over, overBefore) {
				t.Error("Merge modified its arguments")
			}
			if tt.name != "name and extends are the over's" {
				m.Environment.Vars["MUTATED"] = "x"
				m.Filesystem.RO = append(m.Filesystem.RO[:0], Bind{"/x", "/x"})
				if !reflect.DeepEqual(base, before) {
					t.Error("the merged profile shares memory with the base")
				}
			}
		})
	}
}

func TestSet(t *testing.T) {
	p := &Profile{}
	flag := func(name string) Origin { return Origin{File: name} }
	for _, s := range []struct {
		f Field
		v string
	}{
		{FieldMemory, "1G"}, {FieldTimeout, "2.5"}, {FieldPids, "64"}, {FieldCPUs, "0.5"},
		{FieldNoexec, "false"}, {FieldRO, "/b:/m"}, {FieldRO, "/c"},
		{FieldEnvVars, "A=1=2"}, {FieldEnvVars, "B="}, {FieldSeccompPolicy, "strict"},
	} {
		if err := p.Set(s.f, s.v, flag("--"+string(s.f))); err != nil {
			t.Fatalf("Set(%s, %q): %v", s.f, s.v, err)
		}
	}
	want := &Profile{
		Limits:      Limits{Memory: 1 << 30, Timeout: 2500 * time.Millisecond, Pids: 64, CPUs: 0.5},
		Filesystem:  Filesystem{RO: []Bind{{"/b", "/m"}, {"/c", "/c"}}},
		Environment: Environment{Vars: map[string]string{"A": "1=2", "B": ""}},
		Seccomp:     Seccomp{Policy: "strict"},
	}
	if !sameValues(p, want) {
		t.Errorf("got %+v\nwant %+v", p, want)
	}
	if o, _ := p.Origin(FieldPids); o.String() != "--limits.pids" {
		t.Errorf("origin %v", o)
	}

	errs := []struct {
		f    Field
		v    string
		want string
	}{
		{"limits.memroy", "1G", "--memory: unknown field"},
		{FieldMemory, "lots", `--memory: "lots" is not a size`},
		{FieldTimeout, "soon", `--memory: "soon" is not a duration`},
		{FieldPids, "many", `--memory: "many" is not an integer`},
		{FieldCPUs, "one", `--memory: "one" is not a number`},
		{FieldCPUs, "NaN", `--memory: must be a finite number, not NaN`},
		{FieldNoexec, "yes please", `--memory: "yes please" is not true or false`},
		{FieldRO, ":/x", `--memory: ":/x" is not SRC[:DST]`},
		{FieldEnvVars, "NOEQUALS", `--memory: "NOEQUALS" is not NAME=VALUE`},
	}
	for _, e := range errs {
		err := (&Profile{}).Set(e.f, e.v, flag("--memory"))
		if err == nil || err.Error() != e.want {
			t.Errorf("Set(%s, %q) = %v, want %q", e.f, e.v, err, e.want)
		}
	}
}

// sameValues compares the policy of two profiles: the fields' values, not
// which are marked set, where they came from, nor the profile's name.
func sameValues(a, b *Profile) bool {
	norm := func(p *Profile) *Profile {
		c := p.Clone()
		c.Name, c.Extends = "", ""
		if len(c.Environment.Vars) == 0 {
			c.Environment.Vars = nil
		}
		if len(c.Filesystem.RO) == 0 {
			c.Filesystem.RO = nil
		}
		c.set = nil
		return c
	}
	return reflect.DeepEqual(norm(a), norm(b))
}
