package profiles

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/jail"
)

func requestLayer(t *testing.T, vals map[Field]any) *Profile {
	t.Helper()
	l := &Profile{Name: "request"}
	for f, v := range vals {
		if err := l.SetValue(f, v, Origin{File: "request"}); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

func TestTightenTakesTighterValues(t *testing.T) {
	base := Defaults()
	m, err := Tighten(base, requestLayer(t, map[Field]any{FieldMemory: "128M", FieldTimeout: "2s", FieldCPUs: 0.5,
		FieldPids: int64(32), FieldCPUTime: "1s", FieldSwap: int64(0), FieldFileSize: "1M"}))
	if err != nil {
		t.Fatal(err)
	}
	l := m.Limits
	if l.Memory != 128<<20 || l.Timeout != 2*time.Second || l.CPUs != 0.5 || l.Pids != 32 || l.CPUTime != time.Second || l.FileSize != 1<<20 {
		t.Errorf("tightened limits: %+v", l)
	}
	if m.Name != base.Name || base.Limits.Memory != 512<<20 {
		t.Errorf("name %q, base changed: %+v", m.Name, base.Limits)
	}
	if o, _ := m.Origin(FieldMemory); o.File != "request" {
		t.Errorf("memory's origin %v: want the request", o)
	}
}

func TestTightenRefusesLooserValuesNamingTheCeiling(t *testing.T) {
	base := Defaults()
	for _, c := range []struct {
		f    Field
		v    any
		want string
	}{
		{FieldMemory, "1G", "request: limits.memory: 1G is above the ceiling of 512M (profile python)"},
		{FieldTimeout, "11s", "request: limits.timeout: 11s is above the ceiling of 10s (profile python)"},
		{FieldCPUs, 1.5, "request: limits.cpus: 1.5 is above the ceiling of 1 (profile python)"},
		{FieldPids, int64(129), "request: limits.pids: 129 is above the ceiling of 128 (profile python)"},
		{FieldSwap, "1M", "request: limits.swap: 1M is above the ceiling of 0 (profile python)"},
		{FieldFileSize, int64(0), "request: limits.file_size: 0 (no limit) is above the ceiling of 64M (profile python)"},
		{FieldOutput, "2M", "request: limits.output: 2M is above the ceiling of 1M (profile python)"},
		{FieldOpenFiles, int64(257), "request: limits.open_files: 257 is above the ceiling of 256 (profile python)"},
	} {
		_, err := Tighten(base, requestLayer(t, map[Field]any{c.f: c.v}))
		if err == nil || err.Error() != c.want {
			t.Errorf("%s = %v: %v, want %q", c.f, c.v, err, c.want)
		}
	}
	// cpu_time 0 is no limit: with none in the profile, any is tighter.
	if _, err := Tighten(base, requestLayer(t, map[Field]any{FieldCPUTime: "1h"})); err != nil {
		t.Errorf("cpu_time under a profile without one: %v", err)
	}
}

// Only limits can be tightened: anything else in a tighten-only layer is
// refused, never merged (an allowlist or a bind would widen the jail).
func TestTightenRefusesWhatIsNotALimit(t *testing.T) {
	over := &Profile{Name: "request"}
	if err := over.Set(FieldNetworkAllow, "example.org", Origin{File: "request"}); err != nil {
		t.Fatal(err)
	}
	if _, err := Tighten(Defaults(), over); err == nil || !strings.Contains(err.Error(), "network.allow: not a limit") {
		t.Errorf("allowlist in a tighten-only layer: %v", err)
	}
	for _, f := range TightenableFields() {
		if !strings.HasPrefix(string(f), "limits.") {
			t.Errorf("%s is tightenable but not a limit", f)
		}
	}
}

// A value read back with Value and set with SetValue is the same value:
// that is how `run --server` carries its flags in a request.
func TestValueRoundTrips(t *testing.T) {
	p := Defaults()
	p.Limits.Timeout = 1500 * time.Millisecond
	p.Limits.CPUs = 0.25
	for _, f := range TightenableFields() {
		q := &Profile{}
		if err := q.SetValue(f, p.Value(f), Origin{}); err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if q.Text(f) != p.Text(f) {
			t.Errorf("%s: %s read back as %s", f, p.Text(f), q.Text(f))
		}
	}
}

// TestSpecSetsEveryPointedField: every schema row that points at a Spec
// field reaches it, with its value, through Profile.Spec: a limit needs no
// line of its own there. Each field is given a value unlike the default's
// and the Spec must change in exactly the pointed field.
func TestSpecSetsEveryPointedField(t *testing.T) {
	base := Defaults()
	before := base.Spec([]string{"true"}, jail.Host{})
	for _, row := range schema {
		if row.spec == nil {
			continue
		}
		p := base.Clone()
		switch v := row.ptr(p).(type) {
		case *int64:
			*v += 3
		case *time.Duration:
			*v += 3 * time.Second
		case *float64:
			*v += 0.5
		case *string:
			*v += "x"
		case *[]string:
			*v = append(*v, "example.org")
		default:
			t.Fatalf("%s: no test value for %T", row.field, v)
		}
		after := p.Spec([]string{"true"}, jail.Host{})
		got := reflect.ValueOf(row.spec(&after)).Elem().Interface()
		was := reflect.ValueOf(row.spec(&before)).Elem().Interface()
		if reflect.DeepEqual(got, was) {
			t.Errorf("%s: the Spec field did not change (%v)", row.field, got)
		}
		// Everything else is as before (the thread variables follow cpus).
		reset := after
		reflect.ValueOf(row.spec(&reset)).Elem().Set(reflect.ValueOf(was))
		if row.field == FieldCPUs {
			reset.Env = before.Env
		}
		if !reflect.DeepEqual(reset, before) {
			t.Errorf("%s changed more than its own Spec field", row.field)
		}
	}
}

// TestTightenZeroIsNoLimitBothWays: for cpu_time and file_size 0 is no
// limit at all, so under a ceiling a request's 0 is the loosest value, not
// the tightest (a request with cpu_time "0" under a profile's 5s ran with
// no CPU limit), while under a profile without a limit any value is
// tighter. Both directions, each field, against the same table: a refusal
// where the request would loosen the jail, and no refusal where it would
// not.
func TestTightenZeroIsNoLimitBothWays(t *testing.T) {
	for _, c := range []struct {
		f                 Field
		ceiling, req, err string // err: "" when the request is taken
	}{
		{FieldCPUTime, "5s", "0", "request: limits.cpu_time: 0 (no limit) is above the ceiling of 5s"},
		{FieldCPUTime, "5s", "0s", "request: limits.cpu_time: 0 (no limit) is above the ceiling of 5s"},
		{FieldCPUTime, "5s", "6s", "request: limits.cpu_time: 6s is above the ceiling of 5s"},
		{FieldCPUTime, "5s", "5s", ""},
		{FieldCPUTime, "5s", "1ms", ""},
		{FieldCPUTime, "0", "0", ""},
		{FieldCPUTime, "0", "1h", ""},
		{FieldCPUTime, "0", "1ns", ""},
		{FieldFileSize, "64M", "0", "request: limits.file_size: 0 (no limit) is above the ceiling of 64M"},
		{FieldFileSize, "64M", "65M", "request: limits.file_size: 65M is above the ceiling of 64M"},
		{FieldFileSize, "64M", "64M", ""},
		{FieldFileSize, "64M", "1", ""},
		{FieldFileSize, "0", "0", ""},
		{FieldFileSize, "0", "1T", ""},
	} {
		base := Defaults()
		base.Name = ""
		if err := base.SetValue(c.f, c.ceiling, Origin{File: "capped.toml"}); err != nil {
			t.Fatal(err)
		}
		req := requestLayer(t, map[Field]any{c.f: c.req})
		m, err := Tighten(base, req)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != c.err {
			t.Errorf("%s %s under a ceiling of %s: %q, want %q", c.f, c.req, c.ceiling, got, c.err)
			continue
		}
		if err == nil && m.Text(c.f) != req.Text(c.f) {
			t.Errorf("%s %s under a ceiling of %s: tightened to %s", c.f, c.req, c.ceiling, m.Text(c.f))
		}
	}
}
