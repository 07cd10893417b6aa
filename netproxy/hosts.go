package netproxy

import (
	"bufio"
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
)

// HostsResolver reads a hosts(5) file and resolves names from it alone,
// never from DNS. It exists for tests and the selftest, which point test
// names at their own fixtures; it is safe to expose because every address
// it returns still passes the same checks as a DNS answer: it can make a
// name fail, never make a refused address reachable.
func HostsResolver(path string) (func(context.Context, string) ([]netip.Addr, error), error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("hosts file: %w", err)
	}
	defer f.Close()
	table := map[string][]netip.Addr{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		a, err := netip.ParseAddr(fields[0])
		if err != nil {
			return nil, fmt.Errorf("hosts file %s:%d: %v", path, n, err)
		}
		for _, name := range fields[1:] {
			nn, err := NormalizeName(name)
			if err != nil {
				return nil, fmt.Errorf("hosts file %s:%d: %v", path, n, err)
			}
			table[nn] = append(table[nn], a)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("hosts file %s: %w", path, err)
	}
	return func(_ context.Context, name string) ([]netip.Addr, error) {
		if a, ok := table[name]; ok {
			return a, nil
		}
		return nil, fmt.Errorf("%s: not in the hosts file %s", name, path)
	}, nil
}
