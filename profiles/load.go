package profiles

import (
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// builtins holds the built-in profiles, one NAME.toml each. Keep them
// complete (every field set) so that they read as documentation.
//
//go:embed builtin/*.toml
var builtins embed.FS

// MaxExtendsDepth bounds a chain of extends; real chains are two or three
// long, and the bound turns a runaway chain into an error, not a hang.
const MaxExtendsDepth = 8

// maxProfileSize bounds what Load reads, so that --profile /dev/zero fails.
const maxProfileSize = 1 << 20

func pythonTOML() []byte {
	b, _ := builtins.ReadFile("builtin/python.toml") // embedded: cannot fail
	return b
}

// BuiltinNames returns the names of the built-in profiles, sorted.
func BuiltinNames() []string {
	entries, _ := builtins.ReadDir("builtin") // embedded: cannot fail
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".toml"))
	}
	slices.Sort(names)
	return names
}

// Builtin returns the built-in profile name, merged onto Defaults and
// validated.
func Builtin(name string) (*Profile, error) {
	if !slices.Contains(BuiltinNames(), name) {
		return nil, fmt.Errorf("no built-in profile %q (there are %s)", name, strings.Join(BuiltinNames(), ", "))
	}
	return Load(name, nil)
}

// DefaultSearchPath returns where Load looks for a profile given by name, in
// order, before the built-ins: the user's $XDG_CONFIG_HOME/stockade/profiles
// (or ~/.config/... when XDG_CONFIG_HOME is unset), then
// /etc/stockade/profiles. env is os.Getenv or a test's stand-in.
func DefaultSearchPath(env func(string) string) []string {
	var dirs []string
	if x := env("XDG_CONFIG_HOME"); filepath.IsAbs(x) {
		dirs = append(dirs, filepath.Join(x, "stockade", "profiles"))
	} else if h := env("HOME"); filepath.IsAbs(h) {
		// The XDG spec says to ignore a relative XDG_CONFIG_HOME.
		dirs = append(dirs, filepath.Join(h, ".config", "stockade", "profiles"))
	}
	return append(dirs, "/etc/stockade/profiles")
}

// IsPath reports whether Load treats ref as a file path rather than a name:
// it contains a '/' or ends in ".toml".
func IsPath(ref string) bool {
	return strings.Contains(ref, "/") || strings.HasSuffix(ref, ".toml")
}

// Load reads the profile nameOrPath and the chain it extends, merges the
// chain onto Defaults, and validates the result. A path is read as is; a name
// is looked up as NAME.toml in each of search (see DefaultSearchPath), then
// among the built-ins. In extends, a relative path is relative to the file
// that says it, and a profile may extend the profile of its own name that it
// shadows (an /etc/stockade/profiles/python.toml with extends = "python"
// extends the built-in). The result's Name is nameOrPath and its Extends is
// empty, the chain being merged in.
func Load(nameOrPath string, search []string) (*Profile, error) {
	l := loader{search: search}
	src, err := l.resolve(nameOrPath, nil)
	if err != nil {
		return nil, err
	}
	var chain []*Profile
	var seen []string
	for {
		if slices.Contains(seen, src.id) {
			return nil, l.extendsErr(chain, "profile cycle: %s -> %s", strings.Join(seen, " -> "), src.id)
		}
		if len(chain) == MaxExtendsDepth {
			return nil, l.extendsErr(chain, "more than %d profiles in the chain of extends", MaxExtendsDepth)
		}
		seen = append(seen, src.id)
		p, err := src.parse()
		if err != nil {
			return nil, err
		}
		chain = append(chain, p)
		if p.Extends == "" {
			break
		}
		if src, err = l.resolve(p.Extends, src); err != nil {
			return nil, l.extendsErr(chain, "%v", err)
		}
	}
	merged := Defaults()
	for i := len(chain) - 1; i >= 0; i-- {
		merged = Merge(merged, chain[i])
	}
	merged.Name, merged.Extends = nameOrPath, ""
	if err := merged.Validate(); err != nil {
		return nil, err
	}
	return merged, nil
}

type loader struct {
	search []string
}

// source is one profile file found by resolve.
type source struct {
	id      string // what cycles are detected on: an absolute path or builtin:NAME
	display string // what errors call it
	dir     string // where relative extends are resolved; "" for a built-in
	name    string // the name it was found by, "" for a path
	cand    int    // its index among the candidates for name
	data    []byte
}

// resolve finds ref, as said by the profile from (nil at the top).
func (l loader) resolve(ref string, from *source) (*source, error) {
	if IsPath(ref) {
		p := ref
		if from != nil && from.dir != "" && !filepath.IsAbs(p) {
			p = filepath.Join(from.dir, p)
		}
		return readSource(p)
	}
	if !isProfileName(ref) {
		return nil, fmt.Errorf("%q is neither a profile name ([A-Za-z0-9][A-Za-z0-9._-]*) nor a path", ref)
	}
	start := 0
	if from != nil && from.name == ref {
		start = from.cand + 1 // extending the profile this one shadows
	}
	dirs := l.search
	for i := start; i < len(dirs); i++ {
		src, err := readSource(filepath.Join(dirs[i], ref+".toml"))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		src.name, src.cand = ref, i
		return src, nil
	}
	data, err := builtins.ReadFile("builtin/" + ref + ".toml")
	if err != nil || start > len(dirs) {
		var looked []string
		for _, d := range dirs[min(start, len(dirs)):] {
			looked = append(looked, filepath.Join(d, ref+".toml"))
		}
		looked = append(looked, "the built-ins ("+strings.Join(BuiltinNames(), ", ")+")")
		return nil, fmt.Errorf("profile %q not found: looked in %s", ref, strings.Join(looked, ", "))
	}
	return &source{
		id:      "builtin:" + ref,
		display: "builtin:" + ref + ".toml",
		name:    ref,
		cand:    len(dirs),
		data:    data,
	}, nil
}

// parse parses the source; the built-in python profile, the base of every
// chain, is parsed once per process.
func (s *source) parse() (*Profile, error) {
	if s.id == builtinPythonID {
		p, err := builtinPython()
		if err != nil {
			return nil, err
		}
		return p.Clone(), nil
	}
	return Parse(s.display, s.data)
}

// readSource reads a profile file. It must be a regular file: a FIFO or
// /dev/zero given as a profile must fail, not hang.
func readSource(p string) (*source, error) {
	// O_NONBLOCK: opening a FIFO for reading blocks until a writer comes,
	// before any check could refuse it. It does not affect regular files.
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("profile %s: %w", p, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("profile %s: %w", p, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("profile %s: not a regular file", p)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxProfileSize+1))
	if err != nil {
		return nil, fmt.Errorf("profile %s: %w", p, err)
	}
	if len(data) > maxProfileSize {
		return nil, fmt.Errorf("profile %s: larger than %s", p, FormatSize(maxProfileSize))
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return nil, fmt.Errorf("profile %s: %w", p, err)
	}
	return &source{id: abs, display: p, dir: filepath.Dir(p), data: data}, nil
}

// extendsErr reports a problem with the last profile's extends at its line.
func (loader) extendsErr(chain []*Profile, format string, args ...any) error {
	last := chain[len(chain)-1]
	o, _ := last.Origin(FieldExtends)
	return &Error{Origin: o, Field: string(FieldExtends), Msg: fmt.Sprintf(format, args...)}
}

func isProfileName(s string) bool {
	if s == "" || s[0] == '.' || s[0] == '-' || s[0] == '_' {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
