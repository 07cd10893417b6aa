package profiles

import (
	"testing"
	"time"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr string
	}{
		{"0", 0, ""},
		{"512", 512, ""},
		{"512B", 512, ""},
		{"1K", 1024, ""},
		{"1k", 1024, ""},
		{"1KB", 1024, ""},
		{"1KiB", 1024, ""},
		{"1kib", 1024, ""},
		{"512M", 512 << 20, ""},
		{"512 M", 512 << 20, ""},
		{" 512MiB ", 512 << 20, ""},
		{"1G", 1 << 30, ""},
		{"2T", 2 << 40, ""},
		{"1.5G", 3 << 29, ""},
		{"0.5K", 512, ""},
		{"1.0009765625K", 1025, ""},
		{"8388607T", 8388607 << 40, ""},
		{"9223372036854775807", 1<<63 - 1, ""},
		{"12 parsecs", 0, `"12 parsecs" is not a size`},
		{"", 0, `"" is not a size`},
		{"M", 0, `"M" is not a size`},
		{"-1", 0, `"-1" is not a size`},
		{"1.", 0, `"1." is not a size`},
		{".5M", 0, `".5M" is not a size`},
		{"1e3", 0, `"1e3" is not a size`},
		{"1P", 0, `"1P" is not a size`},
		{"1iB", 0, `"1iB" is not a size`},
		{"1MI", 0, `"1MI" is not a size`},
		{"1KKB", 0, `"1KKB" is not a size`},
		{"1BB", 0, `"1BB" is not a size`},
		{"0x10", 0, `"0x10" is not a size`},
		{"8388608T", 0, `"8388608T" is too large a size`},
		{"9223372036854775808", 0, `"9223372036854775808" is too large a size`},
		{"8388607.999999999999999999T", 1<<63 - 1, ""},
	}
	for _, tt := range tests {
		got, err := ParseSize(tt.in)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("ParseSize(%q) error = %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 1: "1", 1023: "1023", 1024: "1K", 1536: "1536", 512 << 20: "512M", 100 << 10: "100K", 3 << 30: "3G", 5 << 40: "5T"} {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestParseDuration(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr string
	}{
		{"10s", 10 * time.Second, ""},
		{"1m30s", 90 * time.Second, ""},
		{"500ms", 500 * time.Millisecond, ""},
		{"0", 0, ""},
		{"0s", 0, ""},
		{"10", 10 * time.Second, ""},
		{"2.5", 2500 * time.Millisecond, ""},
		{" 3 ", 3 * time.Second, ""},
		{"ten seconds", 0, `"ten seconds" is not a duration`},
		{"", 0, `"" is not a duration`},
		{"10 s", 0, `"10 s" is not a duration`},
		{"-1s", 0, `"-1s" is a negative duration`},
		{"-1", 0, `"-1" is not a duration`},
		{"99999999999", 0, `"99999999999" is too long a duration`},
		{"9999999999h", 0, `"9999999999h" is not a duration`},
	}
	for _, tt := range tests {
		got, err := ParseDuration(tt.in)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("ParseDuration(%q) error = %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"512M", "1.5G", "0", "12 parsecs", "8388607T", "1KiB", "0.0000001T", "9223372036854775807"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err != nil {
			return
		}
		if n < 0 {
			t.Fatalf("ParseSize(%q) = %d, negative", s, n)
		}
		back, err := ParseSize(FormatSize(n))
		if err != nil || back != n {
			t.Fatalf("ParseSize(FormatSize(%d) = %q) = %d, %v", n, FormatSize(n), back, err)
		}
	})
}

func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"10s", "1m30s", "2.5", "0", "-1s", "ten", "2562047h47m16.854775807s", "9223372036.854775807"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDuration(s)
		if err != nil {
			return
		}
		if d < 0 {
			t.Fatalf("ParseDuration(%q) = %v, negative", s, d)
		}
		back, err := ParseDuration(FormatDuration(d))
		if err != nil || back != d {
			t.Fatalf("ParseDuration(FormatDuration(%v)) = %v, %v", d, back, err)
		}
	})
}
