package profiles

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/jail"
)

// TestEverySchemaRowIsWired walks the schema and holds each row to every
// door its fields say it has, so that a limit cannot be half-wired: a row
// that points at a Spec field is refused by Validate when its value is
// bad, has a default in the built-in python profile, and (a single value)
// a flag; a row with a result name is reported under it by jail.LimitsOf;
// a row of the [limits] table is tightenable, and Tighten refuses a looser
// value of it naming the ceiling. TestSpecSetsEveryPointedField holds the
// rows to their Spec fields.
func TestEverySchemaRowIsWired(t *testing.T) {
	def := Defaults()
	flags := map[Field]bool{}
	for _, f := range Flags() {
		flags[f.Field] = true
	}
	baseLimits := limitsJSON(t, def)
	claimed := map[string]Field{}
	for _, row := range schema {
		f := row.field
		limitsTable := strings.HasPrefix(string(f), "limits.")
		if (row.result != "" || row.tighten != notTightenable || row.flag != "" || limitsTable) && row.spec == nil {
			t.Errorf("%s: a limit with no jail.Spec field to reach", f)
		}
		if row.spec == nil {
			continue
		}
		// Validate: a bad value is refused, naming the field.
		if row.check == nil {
			t.Errorf("%s: points at a Spec field but has no check for Validate", f)
		} else {
			p := def.Clone()
			setBad(t, row, p)
			if err := p.Validate(); err == nil || !strings.Contains(err.Error(), string(f)) {
				t.Errorf("%s: Validate took a bad value: %v", f, err)
			}
		}
		// The default lives in the built-in python profile.
		if !def.IsSet(f) {
			t.Errorf("%s: no default in the built-in python profile", f)
		}
		// Flags: every single value has one.
		scalar := row.kind != kindStrings && row.kind != kindBinds && row.kind != kindVars
		if scalar != flags[f] {
			t.Errorf("%s: a flag is %v, want %v (a single value has a flag in its row)", f, flags[f], scalar)
		}
		// Tighten: the [limits] table, and only it, may be tightened.
		if limitsTable != (row.tighten != notTightenable) {
			t.Errorf("%s: tightenable is %v, want %v", f, row.tighten != notTightenable, limitsTable)
		}
		if row.tighten != notTightenable {
			checkTightens(t, row, def)
		}
		// Result: the row's value is what the result reports under its name.
		if row.result != "" {
			if other, dup := claimed[row.result]; dup {
				t.Errorf("%s: result %s is %s's already", f, row.result, other)
			}
			claimed[row.result] = f
			p := def.Clone()
			bump(t, row.ptr(p), 3)
			got := limitsJSON(t, p)
			if _, ok := baseLimits[row.result]; !ok {
				t.Errorf("%s: the result has no limit %q", f, row.result)
			} else if reflect.DeepEqual(got[row.result], baseLimits[row.result]) {
				t.Errorf("%s: the result's %s stayed %v when the value changed", f, row.result, got[row.result])
			}
			for k := range got {
				if k != row.result && !reflect.DeepEqual(got[k], baseLimits[k]) {
					t.Errorf("%s: changed the result's %s too", f, k)
				}
			}
		}
	}
	for k := range baseLimits {
		if _, ok := claimed[k]; !ok {
			t.Errorf("the result's limit %s is no schema row's", k)
		}
	}
}

// limitsJSON is the Result.Limits a run of p would report, as JSON reads.
func limitsJSON(t *testing.T, p *Profile) map[string]any {
	t.Helper()
	b, err := json.Marshal(jail.LimitsOf(p.Spec([]string{"true"}, jail.Host{})))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// bump makes a numeric value n times what it was, or n if it was 0.
func bump(t *testing.T, v any, n int64) {
	t.Helper()
	switch x := v.(type) {
	case *int64:
		*x = max(*x*n, n)
	case *time.Duration:
		*x = max(*x*time.Duration(n), time.Duration(n)*time.Second)
	case *float64:
		*x = max(*x*float64(n), float64(n))
	default:
		t.Fatalf("no numeric value to bump: %T", v)
	}
}

// setBad gives the row's field a value no check can take.
func setBad(t *testing.T, row fieldSpec, p *Profile) {
	t.Helper()
	switch x := row.ptr(p).(type) {
	case *int64:
		*x = -1
	case *time.Duration:
		*x = -1
	case *float64:
		*x = -1
	case *string:
		*x = "not/a/value"
	case *[]string:
		*x = []string{"not a rule"}
	default:
		t.Fatalf("%s: no bad value for %T", row.field, x)
	}
}

// checkTightens: a looser value than the base's is refused naming the
// ceiling, the same value is taken.
func checkTightens(t *testing.T, row fieldSpec, def *Profile) {
	t.Helper()
	base := def.Clone()
	bump(t, row.ptr(base), 2) // a limit, even where the default is none
	same := &Profile{Name: "request"}
	if err := same.SetValue(row.field, base.Value(row.field), Origin{File: "request"}); err != nil {
		t.Fatalf("%s: %v", row.field, err)
	}
	if _, err := Tighten(base, same); err != nil {
		t.Errorf("%s: Tighten refused the ceiling itself: %v", row.field, err)
	}
	looser := base.Clone()
	bump(t, row.ptr(looser), 2)
	over := &Profile{Name: "request"}
	if err := over.SetValue(row.field, looser.Value(row.field), Origin{File: "request"}); err != nil {
		t.Fatalf("%s: %v", row.field, err)
	}
	if _, err := Tighten(base, over); err == nil || !strings.Contains(err.Error(), "is above the ceiling of "+base.Text(row.field)) {
		t.Errorf("%s: Tighten took a looser value: %v", row.field, err)
	}
}
