package profiles

import (
	"cmp"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Tighten returns base with over's fields laid over it, as Merge does, but
// refuses any value of over that is looser than base's: over may only make
// a run tighter. It is how a server request's limits meet the server's
// profile, which is their ceiling. Only the fields whose schema row has a
// tighten rule (the [limits] table) may be set in over. Every looser or
// untightenable field is an *Error naming over's origin, the field, the
// value and the ceiling, all of them joined. The result is not validated:
// a tighter value can still be below a minimum, which Validate says.
func Tighten(base, over *Profile) (*Profile, error) {
	var errs []error
	for _, row := range schema {
		o, ok := over.set[row.field]
		if !ok {
			continue
		}
		if msg := row.looser(base, over); msg != "" {
			errs = append(errs, &Error{Origin: o, Field: string(row.field), Msg: msg})
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	m := Merge(base, over)
	m.Name, m.Extends = base.Name, base.Extends
	return m, nil
}

// looser says why over's value of the row's field is looser than base's,
// or "" when it is as tight or tighter.
func (s fieldSpec) looser(base, over *Profile) string {
	if s.tighten == notTightenable {
		return "not a limit that can be tightened here"
	}
	var c int
	var zeroBase, zeroOver bool
	switch b := s.ptr(base).(type) {
	case *int64:
		v := *s.ptr(over).(*int64)
		c, zeroBase, zeroOver = cmp.Compare(v, *b), *b == 0, v == 0
	case *time.Duration:
		v := *s.ptr(over).(*time.Duration)
		c, zeroBase, zeroOver = cmp.Compare(v, *b), *b == 0, v == 0
	case *float64:
		v := *s.ptr(over).(*float64)
		c, zeroBase, zeroOver = cmp.Compare(v, *b), *b == 0, v == 0
	default:
		return "not a limit that can be tightened here"
	}
	ceiling := fmt.Sprintf("the ceiling of %s", base.Text(s.field))
	if base.Name != "" {
		ceiling += " (profile " + base.Name + ")"
	}
	switch {
	case s.tighten == lowerZeroIsNone && zeroBase:
		return "" // no limit in base: any is tighter
	case s.tighten == lowerZeroIsNone && zeroOver:
		return "0 (no limit) is above " + ceiling
	case c > 0:
		return over.Text(s.field) + " is above " + ceiling
	}
	return ""
}

// TightenableFields returns the fields a tighten-only layer may set, in
// schema order: what a server request's "limits" may carry.
func TightenableFields() []Field {
	var fs []Field
	for _, row := range schema {
		if row.tighten != notTightenable {
			fs = append(fs, row.field)
		}
	}
	return fs
}

// SetValue sets field f from a value as a profile file's TOML gives it (a
// string, an int64, a float64 or a bool), recording origin o: the same
// value is accepted or refused, with the same message, as in a file.
// Collections are not set this way. Ranges are left to Validate.
func (p *Profile) SetValue(f Field, v any, o Origin) error {
	row, ok := lookupSpec(f)
	if !ok {
		return &Error{Origin: o, Field: string(f), Msg: "unknown field"}
	}
	switch row.kind {
	case kindBinds, kindVars, kindStrings:
		return &Error{Origin: o, Field: string(f), Msg: "a list or table is not set one value at a time"}
	}
	if err := row.decode(p, v); err != nil {
		return &Error{Origin: o, Field: string(f), Msg: err.Error()}
	}
	p.Mark(f, o)
	return nil
}

// Value returns f's value as a profile file would hold it, for SetValue
// to read back: sizes and durations as their strings ("512M", "1.5s"),
// integers as int64, numbers as float64, booleans and strings as they are;
// nil for a collection or an unknown field.
func (p *Profile) Value(f Field) any {
	row, ok := lookupSpec(f)
	if !ok {
		return nil
	}
	switch v := row.ptr(p).(type) {
	case *string:
		return *v
	case *int64:
		if row.kind == kindSize {
			return FormatSize(*v)
		}
		return *v
	case *time.Duration:
		return FormatDuration(*v)
	case *float64:
		return *v
	case *bool:
		return *v
	}
	return nil
}

// LimitField returns the field of the [limits] table named key
// ("memory" is limits.memory).
func LimitField(key string) (Field, bool) {
	if strings.Contains(key, ".") {
		return "", false
	}
	f := Field("limits." + key)
	_, ok := lookupSpec(f)
	return f, ok
}
