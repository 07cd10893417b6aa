package profiles

import (
	"testing"
)

// FuzzProfile feeds arbitrary documents to Parse. It must never panic, and a
// document it accepts must survive Validate, Merge and TOML, and read back
// from TOML as the same policy.
func FuzzProfile(f *testing.F) {
	for _, n := range BuiltinNames() {
		raw, _ := builtins.ReadFile("builtin/" + n + ".toml")
		f.Add(raw)
	}
	for _, s := range []string{
		"extends = \"python\"\n[limits]\nmemory = \"12 parsecs\"\n",
		"[limits]\nmemroy = 1\n[bogus.x]\ny = 2\n",
		"[environment.vars]\nA.B = 1\n\"x y\" = \"\\u0001\"\n",
		"[filesystem]\nro = [\"/a:/b\", \"/c\", 5]\n",
		"[[limits]]\n",
		"\"limits.memory\" = 1\nlimits.timeout = 2.5\n",
		"[limits]\ncpus = nan\ncpu_time = inf\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		p, err := Parse("fuzz.toml", src)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		_ = p.Validate()
		m := Merge(Defaults(), p)
		_ = m.Validate()
		out, err := p.TOML()
		if err != nil {
			// Only a string that is not UTF-8 has no TOML form, and the TOML
			// parser refuses those, so this cannot happen.
			t.Fatalf("TOML: %v", err)
		}
		back, err := Parse("show.toml", out)
		if err != nil {
			t.Fatalf("reading back\n%s\n: %v", out, err)
		}
		if !sameValues(back, p) || !equalFields(back.SetFields(), p.SetFields()) {
			t.Fatalf("round trip changed the profile:\n%s\n%+v\n%+v", out, back, p)
		}
	})
}
