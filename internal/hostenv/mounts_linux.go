package hostenv

import (
	"fmt"
	"os"
	"slices"
	"strings"
)

// MountsBelow returns the mount points strictly below dir in this mount
// namespace, deepest first. dir must be absolute and clean, as the
// kernel writes mount points.
func MountsBelow(dir string) ([]string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	prefix := strings.TrimSuffix(dir, "/") + "/"
	var below []string
	for _, line := range strings.Split(string(data), "\n") {
		// id parent maj:min root mountpoint options ...
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		if mp := unescapeMountinfo(f[4]); strings.HasPrefix(mp, prefix) {
			below = append(below, mp)
		}
	}
	slices.SortFunc(below, func(a, b string) int { return len(b) - len(a) })
	return below, nil
}

// unescapeMountinfo undoes the octal escapes (\040 for space) of mountinfo.
func unescapeMountinfo(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var c byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%3o", &c); err == nil {
				b.WriteByte(c)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
