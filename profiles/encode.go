package profiles

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// TOML renders p as a profile file, every set field in schema order, each
// with a comment saying where its value came from, for `stockade profile
// show`. Parse reads the result back to an equal profile. extends is left
// out when p is the result of Load, whose chain is already merged in.
func (p *Profile) TOML() ([]byte, error) {
	var b bytes.Buffer
	if p.Name != "" {
		fmt.Fprintf(&b, "# stockade profile %s\n", p.Name)
	}
	table := ""
	for _, spec := range schema {
		origin, ok := p.set[spec.field]
		if !ok {
			continue
		}
		tab, key, nested := strings.Cut(string(spec.field), ".")
		if !nested {
			key, tab = tab, ""
		}
		if tab != table {
			if !slices.Contains(tables, tab) {
				return nil, fmt.Errorf("internal: field %s is in no table", spec.field)
			}
			fmt.Fprintf(&b, "\n[%s]\n", tab)
			table = tab
		}
		val, err := spec.tomlValue(p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", spec.field, err)
		}
		fmt.Fprintf(&b, "%s = %s", key, val)
		if o := origin.String(); o != "" {
			fmt.Fprintf(&b, " # %s", strings.ReplaceAll(o, "\n", " "))
		}
		b.WriteByte('\n')
	}
	return b.Bytes(), nil
}

// Text returns f's value in the form a flag takes it ("512M", "10s", "1",
// "true"), for help texts and tables of defaults. A collection is shown in
// its TOML form.
func (p *Profile) Text(f Field) string {
	spec, ok := lookupSpec(f)
	if !ok {
		return ""
	}
	switch v := spec.ptr(p).(type) {
	case *string:
		return *v
	case *int64:
		if spec.kind == kindSize {
			return FormatSize(*v)
		}
		return strconv.FormatInt(*v, 10)
	case *time.Duration:
		if *v == 0 {
			return "0"
		}
		return FormatDuration(*v)
	case *float64:
		return strconv.FormatFloat(*v, 'f', -1, 64)
	case *bool:
		return strconv.FormatBool(*v)
	}
	val, _ := spec.tomlValue(p)
	return val
}

func (s fieldSpec) tomlValue(p *Profile) (string, error) {
	switch v := s.ptr(p).(type) {
	case *string:
		return tomlString(*v)
	case *int64:
		if s.kind == kindSize {
			return tomlString(FormatSize(*v))
		}
		return strconv.FormatInt(*v, 10), nil
	case *time.Duration:
		return tomlString(FormatDuration(*v))
	case *float64:
		switch {
		case math.IsNaN(*v):
			return "nan", nil
		case math.IsInf(*v, 1):
			return "inf", nil
		case math.IsInf(*v, -1):
			return "-inf", nil
		}
		f := strconv.FormatFloat(*v, 'f', -1, 64)
		if !strings.Contains(f, ".") {
			f += ".0" // keep it a TOML float
		}
		return f, nil
	case *bool:
		return strconv.FormatBool(*v), nil
	case *[]Bind:
		parts := make([]string, len(*v))
		for i, bind := range *v {
			q, err := tomlString(bind.String())
			if err != nil {
				return "", err
			}
			parts[i] = q
		}
		return "[" + strings.Join(parts, ", ") + "]", nil
	case *[]string:
		parts := make([]string, len(*v))
		for i, e := range *v {
			q, err := tomlString(e)
			if err != nil {
				return "", err
			}
			parts[i] = q
		}
		return "[" + strings.Join(parts, ", ") + "]", nil
	case *map[string]string:
		names := make([]string, 0, len(*v))
		for n := range *v {
			names = append(names, n)
		}
		slices.Sort(names)
		parts := make([]string, len(names))
		for i, n := range names {
			k, err := tomlString(n)
			if err != nil {
				return "", err
			}
			if isEnvName(n) {
				k = n
			}
			val, err := tomlString((*v)[n])
			if err != nil {
				return "", err
			}
			parts[i] = k + " = " + val
		}
		if len(parts) == 0 {
			return "{}", nil
		}
		return "{ " + strings.Join(parts, ", ") + " }", nil
	}
	return "", fmt.Errorf("internal: no TOML form for %T", s.ptr(p))
}

// tomlString quotes s as a TOML basic string. Go's %q is not TOML: its \x
// escapes are invalid there, so escapes are written out here.
func tomlString(s string) (string, error) {
	if !utf8.ValidString(s) {
		return "", fmt.Errorf("%q is not valid UTF-8", s)
	}
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String(), nil
}
