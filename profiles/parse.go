package profiles

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"
)

// Parse reads one profile file's TOML. file names it in errors ("mine.toml",
// "builtin:python.toml"). Only the fields the file sets are set; extends is
// recorded, not followed (Load follows it). Unknown fields, wrong types and
// values that do not parse are errors, all of them joined, in document order.
// Range checks are left to Validate, which sees the merged profile.
func Parse(file string, src []byte) (*Profile, error) {
	var top map[string]toml.Primitive
	md, err := toml.NewDecoder(bytes.NewReader(src)).Decode(&top)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, &Error{Origin: Origin{File: file, Line: pe.Position.Line}, Msg: "invalid TOML: " + pe.Message}
		}
		return nil, &Error{Origin: Origin{File: file}, Msg: "invalid TOML: " + err.Error()}
	}
	d := &decoder{
		file:  file,
		md:    &md,
		prims: make(map[string]toml.Primitive, len(top)),
		p:     &Profile{Name: file},
	}
	for k, v := range top {
		d.prims[toml.Key{k}.String()] = v
	}
	for _, k := range md.Keys() {
		d.cur = k
		d.key(k)
	}
	if len(d.errs) > 0 {
		return nil, errors.Join(d.errs...)
	}
	return d.p, nil
}

// decoder walks a document's keys in order against the schema. It gets a
// toml.Primitive for any key so that it can both decode the value and learn
// its line (see line).
type decoder struct {
	file  string
	md    *toml.MetaData
	prims map[string]toml.Primitive // by toml.Key.String()
	p     *Profile
	errs  []error
	skip  []toml.Key // keys whose descendants are not looked at again
	cur   toml.Key   // the key being walked, for the line of implicit tables
}

func (d *decoder) key(k toml.Key) {
	for _, s := range d.skip {
		if len(k) > len(s) && slices.Equal(k[:len(s)], s) {
			return
		}
	}
	switch {
	case len(k) == 1 && slices.Contains(tables, k[0]):
		if t := d.md.Type(k...); t != "Hash" {
			d.fail(k, "must be a table, not %s", tomlTypeWord(t))
		}
	case len(k) == 3 && k[0] == "environment" && k[1] == "vars":
		if err := decodeVar(d.p, k[2], d.value(k)); err != nil {
			d.fail(k, "%v", err)
		}
	case len(k) > 3 && k[0] == "environment" && k[1] == "vars":
		// environment.vars.A.B = 1 makes A a table; say so about A.
		d.key(k[:3])
	default:
		// A dotted key below a field (limits.memory.max = 1) makes the field
		// a table, so the shortest known prefix is the one to complain about.
		for n := 1; n <= len(k); n++ {
			if spec, ok := specFor(k[:n]); ok {
				d.field(k[:n], spec)
				return
			}
		}
		d.unknown(k)
	}
}

// specFor returns the field k names. A quoted top-level key "limits.memory"
// is not limits.memory.
func specFor(k toml.Key) (fieldSpec, bool) {
	spec, ok := lookupSpec(Field(strings.Join(k, ".")))
	if !ok || strings.Count(string(spec.field), ".") != len(k)-1 {
		return fieldSpec{}, false
	}
	return spec, true
}

func (d *decoder) field(k toml.Key, spec fieldSpec) {
	origin := Origin{File: d.file, Line: d.line(k)}
	v := d.value(k)
	switch spec.kind {
	case kindBinds:
		elems, ok := v.([]any)
		if !ok {
			d.fail(k, "%v", mustBe("an array of \"SRC[:DST]\" strings", v))
			return
		}
		for i, e := range elems {
			if err := decodeBind(d.p, e); err != nil {
				d.errs = append(d.errs, &Error{Origin: origin, Field: fmt.Sprintf("%s[%d]", k, i), Msg: err.Error()})
				d.skip = append(d.skip, k)
			}
		}
	case kindVars:
		if t := d.md.Type(k...); t != "Hash" {
			d.fail(k, "must be a table of NAME = \"value\", not %s", tomlTypeWord(t))
			return
		}
		if d.p.Environment.Vars == nil {
			d.p.Environment.Vars = make(map[string]string)
		}
	default:
		if err := spec.decode(d.p, v); err != nil {
			d.fail(k, "%v", err)
			return
		}
	}
	d.p.Mark(spec.field, origin)
}

// unknown reports the shortest prefix of k that the schema does not know, once.
func (d *decoder) unknown(k toml.Key) {
	n := 1
	if slices.Contains(tables, k[0]) {
		n = 2
	}
	if n > len(k) {
		n = len(k)
	}
	d.fail(k[:n], "unknown field")
}

func (d *decoder) fail(k toml.Key, format string, args ...any) {
	d.errs = append(d.errs, &Error{
		Origin: Origin{File: d.file, Line: d.line(k)},
		Field:  k.String(),
		Msg:    fmt.Sprintf(format, args...),
	})
	d.skip = append(d.skip, k)
}

// value decodes k's value into an any: string, int64, float64, bool,
// time.Time, []any or map[string]any.
func (d *decoder) value(k toml.Key) any {
	prim, ok := d.prim(k)
	if !ok {
		return nil
	}
	var v any
	if err := d.md.PrimitiveDecode(prim, &v); err != nil {
		return nil
	}
	return v
}

// prim finds k's Primitive, decoding its parent tables into Primitives as
// needed.
func (d *decoder) prim(k toml.Key) (toml.Primitive, bool) {
	if p, ok := d.prims[k.String()]; ok {
		return p, true
	}
	if len(k) < 2 {
		return toml.Primitive{}, false
	}
	parent := k[: len(k)-1 : len(k)-1]
	pp, ok := d.prim(parent)
	if !ok {
		return toml.Primitive{}, false
	}
	var children map[string]toml.Primitive
	if err := d.md.PrimitiveDecode(pp, &children); err != nil {
		return toml.Primitive{}, false
	}
	for name, c := range children {
		d.prims[append(parent, name).String()] = c
	}
	p, ok := d.prims[k.String()]
	return p, ok
}

// line returns the line k is defined on, or 0. toml.MetaData keeps every
// key's position but exports it only inside the ParseError of a failed
// Unmarshaler, so we decode k into a probe that always fails and read the
// position off the error.
//
// A table defined only implicitly (a in [a.b], or memory in memory.max = 1)
// has no line of its own; it gets the line of the key being walked.
func (d *decoder) line(k toml.Key) int {
	for _, k := range []toml.Key{k, d.cur} {
		if prim, ok := d.prim(k); ok {
			var pe toml.ParseError
			if errors.As(d.md.PrimitiveDecode(prim, lineProbe{}), &pe) && pe.Position.Line > 0 {
				return pe.Position.Line
			}
		}
	}
	return 0
}

type lineProbe struct{}

var errLineProbe = errors.New("line probe")

func (lineProbe) UnmarshalTOML(any) error { return errLineProbe }

// tomlTypeWord turns toml.MetaData.Type names into words for messages.
func tomlTypeWord(t string) string {
	switch t {
	case "Hash":
		return "a table"
	case "ArrayHash":
		return "an array of tables"
	case "Array":
		return "an array"
	case "String":
		return "a string"
	case "Integer":
		return "an integer"
	case "Float":
		return "a float"
	case "Bool":
		return "a boolean"
	}
	return "a date or time"
}
