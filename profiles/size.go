package profiles

import (
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"time"
)

// sizeUnits are binary multiples, as in docker --memory and the kernel's own
// cgroup files: a jail's limits are compared against page-sized allocations,
// so "512M" meaning 512 MiB is what users expect, and SI multiples would make
// "1G" silently 7% smaller.
var sizeUnits = []struct {
	suffix string
	shift  uint
}{
	{"T", 40}, {"G", 30}, {"M", 20}, {"K", 10},
}

// ParseSize parses a byte size: a non-negative decimal number (a fraction is
// allowed, "1.5G") optionally followed by a unit K, M, G or T, which may be
// written with iB or B ("512M", "512MiB", "512MB" are all 512*2^20) and in
// either case. All multiples are binary (K = 1024). A bare number or a "B"
// suffix means bytes. Space between number and unit is allowed. The result is
// rounded down to whole bytes.
func ParseSize(s string) (int64, error) {
	bad := fmt.Errorf("%q is not a size", s)
	t := strings.TrimSpace(s)
	num := strings.TrimRight(t, "KMGTkmgtIiBb ")
	unit := strings.ToUpper(strings.TrimSpace(t[len(num):]))
	if num == "" || !isDecimal(num) {
		return 0, bad
	}
	var shift uint
	switch u := strings.TrimSuffix(strings.TrimSuffix(unit, "B"), "I"); {
	case unit == "" || unit == "B":
	case len(u) == 1 && (unit == u || unit == u+"B" || unit == u+"IB"):
		for _, su := range sizeUnits {
			if su.suffix == u {
				shift = su.shift
			}
		}
		if shift == 0 {
			return 0, bad
		}
	default:
		return 0, bad
	}
	whole, frac, _ := strings.Cut(num, ".")
	w, err := strconv.ParseUint(whole, 10, 64)
	if err != nil || w > math.MaxInt64>>shift {
		return 0, fmt.Errorf("%q is too large a size", s)
	}
	n := int64(w) << shift
	if frac != "" {
		// Fractions are computed exactly on the digits rather than through a
		// float, so that "0.5K" is 512 and large sizes lose no precision.
		f, _ := strconv.ParseUint((frac + "000000000000000000")[:18], 10, 64)
		hi, lo := bits.Mul64(f, 1<<shift)
		part, _ := bits.Div64(hi, lo, 1e18) // hi < 2^36 < 1e18: no overflow
		// part < 2^shift and w<<shift <= MaxInt64 &^ (2^shift-1): the sum fits.
		n += int64(part)
	}
	return n, nil
}

// isDecimal reports whether s is digits with at most one '.' and at least one
// digit before it.
func isDecimal(s string) bool {
	whole, frac, hasDot := strings.Cut(s, ".")
	if whole == "" || (hasDot && frac == "") {
		return false
	}
	for _, part := range []string{whole, frac} {
		for _, c := range part {
			if c < '0' || c > '9' {
				return false
			}
		}
	}
	return true
}

// FormatSize formats n in the largest unit that represents it exactly
// ("512M", "100K", "1000"), so that ParseSize(FormatSize(n)) == n.
func FormatSize(n int64) string {
	if n > 0 {
		for _, su := range sizeUnits {
			if n&(1<<su.shift-1) == 0 {
				return strconv.FormatInt(n>>su.shift, 10) + su.suffix
			}
		}
	}
	return strconv.FormatInt(n, 10)
}

// ParseDuration parses a non-negative duration: a Go duration ("1m30s",
// "500ms", "2h") or a plain number of seconds ("10", "2.5"), the latter
// because timeouts are most often thought of in seconds.
func ParseDuration(s string) (time.Duration, error) {
	t := strings.TrimSpace(s)
	if t != "" && isDecimal(t) {
		f, err := strconv.ParseFloat(t, 64)
		if err != nil || f*float64(time.Second) >= math.MaxInt64 {
			return 0, fmt.Errorf("%q is too long a duration", s)
		}
		return time.Duration(f * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(t)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("%q is a negative duration", s)
	}
	return d, nil
}

// FormatDuration formats d so that ParseDuration(FormatDuration(d)) == d.
func FormatDuration(d time.Duration) string {
	return d.String()
}
