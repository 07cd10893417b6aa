package hostenv

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// IDRange is one line of /proc/self/uid_map or gid_map: ids Inside up to
// Inside+Count-1 of stockade's own user namespace are Outside... in the
// namespace above it.
type IDRange struct {
	Inside, Outside, Count uint32
}

// IDMap is what a user namespace maps; nil or empty means nothing.
type IDMap []IDRange

// ReadIDMap reads a uid_map or gid_map file.
func ReadIDMap(path string) (IDMap, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	var m IDMap
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		if len(fields) != 3 {
			return nil, fmt.Errorf("read %s: bad line %q", path, sc.Text())
		}
		var v [3]uint32
		for i, s := range fields {
			n, err := strconv.ParseUint(s, 10, 32)
			if err != nil {
				return nil, fmt.Errorf("read %s: bad line %q", path, sc.Text())
			}
			v[i] = uint32(n)
		}
		m = append(m, IDRange{Inside: v[0], Outside: v[1], Count: v[2]})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return m, nil
}

// Outside returns the id that id is in the namespace above, and whether
// it is mapped at all.
func (m IDMap) Outside(id int) (uint32, bool) {
	if id < 0 || id > 4294967294 {
		return 0, false
	}
	u := uint32(id)
	for _, r := range m {
		if u >= r.Inside && u-r.Inside < r.Count {
			return r.Outside + (u - r.Inside), true
		}
	}
	return 0, false
}

// Usable reports whether the jail user may become id: it must exist in
// stockade's namespace and must not be root of the namespace above, which
// for the initial namespace is host root.
func (m IDMap) Usable(id int) bool {
	out, ok := m.Outside(id)
	return ok && out != 0
}

// Describe renders a map for an error message, as the kernel's file has it.
func (m IDMap) Describe() string {
	if len(m) == 0 {
		return "nothing"
	}
	parts := make([]string, len(m))
	for i, r := range m {
		parts[i] = fmt.Sprintf("%d %d %d", r.Inside, r.Outside, r.Count)
	}
	return strings.Join(parts, "; ")
}
