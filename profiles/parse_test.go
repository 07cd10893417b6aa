package profiles

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestParseErrors covers every message Parse gives, each with the file, line
// and field it must name.
func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []string // one per error, in document order
	}{
		{"bad size names file, line and field", "[limits]\n\n\n\n\n\nmemory = \"12 parsecs\"\n",
			[]string{`mine.toml:7: limits.memory: "12 parsecs" is not a size`}},
		{"unknown field in a table", "[limits]\ntimeout = \"1s\"\nmemroy = \"1G\"\n",
			[]string{`mine.toml:3: limits.memroy: unknown field`}},
		{"unknown top-level field", "extend = \"python\"\n",
			[]string{`mine.toml:1: extend: unknown field`}},
		{"unknown table reported once", "[limitz]\nmemory = 1\npids = 2\n",
			[]string{`mine.toml:1: limitz: unknown field`}},
		{"unknown implicit table", "\n[bogus.sub]\nx = 1\n",
			[]string{`mine.toml:2: bogus: unknown field`}},
		{"dotted key below a field", "[limits]\nmemory.max = 1\n",
			[]string{`mine.toml:2: limits.memory: must be a size ("512M" or a number of bytes), not a table`}},
		{"unknown dotted key under a table", "[filesystem]\nx.y = 1\n",
			[]string{`mine.toml:2: filesystem.x: unknown field`}},
		{"field names are case-sensitive", "[limits]\nMemory = \"1G\"\n",
			[]string{`mine.toml:2: limits.Memory: unknown field`}},
		{"quoted dotted key is not a field", "\"limits.memory\" = \"1G\"\n",
			[]string{`mine.toml:1: "limits.memory": unknown field`}},
		{"table that is a value", "limits = 5\n",
			[]string{`mine.toml:1: limits: must be a table, not an integer`}},
		{"table that is an array of tables", "[[limits]]\nmemory = \"1G\"\n",
			[]string{`mine.toml:1: limits: must be a table, not an array of tables`}},
		{"string field given a number", "extends = 1\n",
			[]string{`mine.toml:1: extends: must be a string, not the integer 1`}},
		{"integer field given a string", "[limits]\npids = \"12\"\n",
			[]string{`mine.toml:2: limits.pids: must be an integer, not the string "12"`}},
		{"integer field given a float", "[limits]\npids = 1.5\n",
			[]string{`mine.toml:2: limits.pids: must be an integer, not the float 1.5`}},
		{"number field given a string", "[limits]\ncpus = \"1\"\n",
			[]string{`mine.toml:2: limits.cpus: must be a number, not the string "1"`}},
		{"number field given nan", "[limits]\ncpus = nan\n",
			[]string{`mine.toml:2: limits.cpus: must be a finite number, not NaN`}},
		{"number field given inf", "[limits]\ncpus = -inf\n",
			[]string{`mine.toml:2: limits.cpus: must be a finite number, not -Inf`}},
		{"bool field given a string", "[filesystem]\nnoexec = \"yes\"\n",
			[]string{`mine.toml:2: filesystem.noexec: must be true or false, not the string "yes"`}},
		{"size given a bool", "[limits]\nmemory = true\n",
			[]string{`mine.toml:2: limits.memory: must be a size ("512M" or a number of bytes), not true`}},
		{"negative size", "[limits]\nmemory = -1\n",
			[]string{`mine.toml:2: limits.memory: -1 is a negative size`}},
		{"too large size", "[limits]\nmemory = \"9000000T\"\n",
			[]string{`mine.toml:2: limits.memory: "9000000T" is too large a size`}},
		{"bad duration", "[limits]\ntimeout = \"ten seconds\"\n",
			[]string{`mine.toml:2: limits.timeout: "ten seconds" is not a duration`}},
		{"negative duration string", "[limits]\ntimeout = \"-1s\"\n",
			[]string{`mine.toml:2: limits.timeout: "-1s" is a negative duration`}},
		{"negative duration integer", "[limits]\ntimeout = -1\n",
			[]string{`mine.toml:2: limits.timeout: -1 is a negative duration`}},
		{"too long duration integer", "[limits]\ntimeout = 9223372037\n",
			[]string{`mine.toml:2: limits.timeout: 9223372037 is too long a duration`}},
		{"negative duration float", "[limits]\ncpu_time = -0.5\n",
			[]string{`mine.toml:2: limits.cpu_time: -0.5 is not a duration`}},
		{"nan duration", "[limits]\ncpu_time = nan\n",
			[]string{`mine.toml:2: limits.cpu_time: NaN is not a duration`}},
		{"too long duration float", "[limits]\ncpu_time = 1e19\n",
			[]string{`mine.toml:2: limits.cpu_time: 1e+19 is too long a duration`}},
		{"duration given a date", "[limits]\ntimeout = 1979-05-27\n",
			[]string{`mine.toml:2: limits.timeout: must be a duration ("10s" or a number of seconds), not a date or time`}},
		{"ro not an array", "[filesystem]\nro = \"/a\"\n",
			[]string{`mine.toml:2: filesystem.ro: must be an array of "SRC[:DST]" strings, not the string "/a"`}},
		{"ro element not a string", "[filesystem]\nro = [\"/a\", 5, \"/b\"]\n",
			[]string{`mine.toml:2: filesystem.ro[1]: must be a string "SRC[:DST]", not the integer 5`}},
		{"ro element empty destination", "[filesystem]\nro = [\"/a:\"]\n",
			[]string{`mine.toml:2: filesystem.ro[0]: "/a:" is not SRC[:DST]`}},
		{"ro element a table", "[filesystem]\nro = [{ src = \"/a\" }]\n",
			[]string{`mine.toml:2: filesystem.ro[0]: must be a string "SRC[:DST]", not a table`}},
		{"vars not a table", "[environment]\nvars = [\"A=1\"]\n",
			[]string{`mine.toml:2: environment.vars: must be a table of NAME = "value", not an array`}},
		{"var value an array", "[environment.vars]\nA = \"x\"\nB = [1]\n",
			[]string{`mine.toml:3: environment.vars.B: must be a string, not an array`}},
		{"var value a table", "[environment.vars.B]\nC = 1\n",
			[]string{`mine.toml:1: environment.vars.B: must be a string, not a table`}},
		{"var value a dotted table", "[environment.vars]\nB.C.D = 1\n",
			[]string{`mine.toml:2: environment.vars.B: must be a string, not a table`}},
		{"unknown key in environment", "[environment]\npass = [\"TERM\"]\n",
			[]string{`mine.toml:2: environment.pass: unknown field`}},
		{"syntax error", "[limits]\nmemory = \n",
			[]string{`mine.toml:2: invalid TOML: expected value but found '\n' instead`}},
		{"duplicate key", "[limits]\npids = 1\npids = 2\n",
			[]string{`mine.toml:3: invalid TOML: Key 'limits.pids' has already been defined.`}},
		{"every error, in order", "[limits]\nmemroy = 1\npids = \"x\"\n[network]\nmode = 5\n",
			[]string{
				`mine.toml:2: limits.memroy: unknown field`,
				`mine.toml:3: limits.pids: must be an integer, not the string "x"`,
				`mine.toml:5: network.mode: must be a string, not the integer 5`,
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse("mine.toml", []byte(tt.src))
			if err == nil {
				t.Fatalf("Parse succeeded: %+v", p)
			}
			if got := strings.Split(err.Error(), "\n"); strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("errors:\n%s\nwant:\n%s", err, strings.Join(tt.want, "\n"))
			}
			var pe *Error
			if !errors.As(err, &pe) {
				t.Errorf("error %T is not an *Error", err)
			}
		})
	}
}

func TestParseSetsOnlyWhatTheFileSays(t *testing.T) {
	src := `extends = "python"
[limits]
memory = 1073741824
timeout = 2.5
cpu_time = 3
cpus = 2
[filesystem]
ro = ["/data/models:/models", "/srv/wheels"]
[environment]
vars = { A = "x", N = 1, B = true }
`
	p, err := Parse("mine.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := []Field{FieldExtends, FieldTimeout, FieldCPUTime, FieldMemory, FieldCPUs, FieldRO, FieldEnvVars}
	if got := p.SetFields(); !equalFields(got, want) {
		t.Errorf("set fields = %v, want %v", got, want)
	}
	if p.Extends != "python" || p.Limits.Memory != 1<<30 || p.Limits.Timeout != 2500*time.Millisecond ||
		p.Limits.CPUTime != 3*time.Second || p.Limits.CPUs != 2 {
		t.Errorf("values: %+v", p)
	}
	if len(p.Filesystem.RO) != 2 || p.Filesystem.RO[0] != (Bind{"/data/models", "/models"}) || p.Filesystem.RO[1] != (Bind{"/srv/wheels", "/srv/wheels"}) {
		t.Errorf("ro = %v", p.Filesystem.RO)
	}
	if v := p.Environment.Vars; v["A"] != "x" || v["N"] != "1" || v["B"] != "true" || len(v) != 3 {
		t.Errorf("vars = %v", v)
	}
	if o, _ := p.Origin(FieldMemory); o != (Origin{"mine.toml", 3}) {
		t.Errorf("memory origin = %v", o)
	}
}

func equalFields(a, b []Field) bool {
	return strings.Join(fieldStrings(a), ",") == strings.Join(fieldStrings(b), ",")
}

func fieldStrings(fs []Field) []string {
	s := make([]string, len(fs))
	for i, f := range fs {
		s[i] = string(f)
	}
	return s
}
