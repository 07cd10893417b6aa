package main

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stockade/stockade/jail"
	"github.com/urfave/cli/v2"
)

// badFlagValues are, per flag, values that must be refused before any jail
// starts: zero where zero means nothing, negative, huge, a missing unit,
// not a number, relative, "..", NUL, reserved paths, duplicates.
var badFlagValues = map[string][]string{
	"timeout":      {"0", "0s", "-1s", "soon", "10 parsecs", "", "99999999999999999", "9999999999h", "1e3"},
	"cpu-time":     {"-1s", "later", "", "99999999999999999", "10 parsecs"},
	"memory":       {"0", "1", "4095K", "-1", "-512M", "lots", "", "512 parsecs", "9999999T", "1e9", "NaN"},
	"swap":         {"-1", "lots", "", "9999999T", "1.5.5G"},
	"cpus":         {"0", "-1", "NaN", "nan", "Inf", "-Inf", "1025", "1e400", "one", "", "0x"},
	"pids":         {"0", "-1", "1", "2", "15", "4194305", "99999999999999999999", "1.5", "many", ""},
	"output-limit": {"0", "-1", "lots", "", "9999999T"},
	"open-files":   {"0", "2", "-1", "1048577", "1M", "many", ""},
	"file-size":    {"-1", "lots", "", "9999999T"},
	"tmpfs-size":   {"0", "-1", "lots", "", "9999999T"},
	"work-size":    {"0", "-1", "lots", "", "9999999T"},
	"rootfs":       {"", "root", "./root", "/srv/../etc", "/srv/root/", "/srv/\x00root"},
	"seccomp":      {"", "none", "Python", "python "},
	"isolation":    {"", "VM", "kvm", "container", "vm "},
	"workdir":      {"", "work", "./work", "/", "/srv/../etc", "/srv/work/", "/srv/\x00work"},
	"ro": {"", ":", "rel:/x", "/usr/share:rel", "/usr/share:", ":/x", "/usr/share:/", "/usr/share:/work",
		"/usr/share:/work/x", "/usr/share:/proc", "/usr/share:/proc/1", "/usr/share:/dev/x", "/usr/share:/sys",
		"/usr/share:/tmp", "/usr/share:/etc/passwd", "/usr/share:/etc/hostname", "/usr/../etc:/x",
		"/usr/share:/x/../y", "/usr/\x00share:/x", "/usr/share:/x\x00"},
	"env": {"", "NOEQUALS", "=v", "1A=x", "A-B=x", "A B=x", "A=\x00", "\x00=x"},
	"allow-net": {"exa mple.org", "a\x00b.org", "*.com", "*", "pypi.org:0", "pypi.org:65536", "user@pypi.org",
		"pypi.org%2f", "fe80::1%lo", "[::1", "1.2.3", "-x.org", "pypi.org/simple"},
	"allow-private":    {"127.0.0.1", "127.0.0.0/8", "169.254.169.254", "169.254.0.0/16", "::1", "fe80::/10", "fd00:ec2::254", "ten", "10.0.0.0/33"},
	"net-max-tunnels":  {"0", "-1", "4097", "many", "1.5", ""},
	"net-max-upload":   {"0", "-1", "lots", "", "9999999T"},
	"net-max-download": {"0", "-1", "lots", "", "9999999T"},
}

// Every bad value: exit 125, no jail started, and every line naming the
// flag: the refusal, then any hint that answers it (--ro into /work gets
// one, the alternative that works).
func TestBadFlagValuesExit125NamingTheFlag(t *testing.T) {
	for _, f := range policyFlags {
		if _, ok := badFlagValues[f.name]; !ok {
			t.Errorf("no bad values tried for --%s", f.name)
		}
	}
	for flag, values := range badFlagValues {
		for _, v := range values {
			code, out, stderr := invoke(t, "", "run", "--json", "--"+flag, v, "--", "true")
			lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
			named := len(lines) <= 2
			for _, l := range lines {
				named = named && strings.HasPrefix(l, "stockade: --"+flag)
			}
			if code != jail.ExitJailError || !named || out != "" {
				t.Errorf("--%s %q: exit %d, stdout %q, stderr %q; want 125 and a line (and a hint) naming --%s", flag, v, code, out, stderr, flag)
			}
		}
	}
	for _, args := range [][]string{
		{"--env", "A=1", "--env", "A=2"},
		{"--env", "A=1,A=2", "--env", "A=3"}, // one variable "1,A=2", then A again
		{"--ro", "/usr/share:/m", "--ro", "/usr/lib:/m"},
		{"--workdir", "/srv", "--no-workdir"},
	} {
		code, _, stderr := invoke(t, "", append(append([]string{"run"}, args...), "--", "true")...)
		if code != jail.ExitJailError || strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, "stockade: "+args[0]) {
			t.Errorf("%q: exit %d, stderr %q", args, code, stderr)
		}
	}
}

// A comma is part of a value, not a separator between two.
func TestCommaIsPartOfAFlagValue(t *testing.T) {
	spec, err := parseRun([]string{"--env", "LIST=a,b", "--ro", "/usr/share/a,b:/data", "--", "true"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(spec.Env, "LIST=a,b") || len(spec.ReadOnly) != 1 || spec.ReadOnly[0].Source != "/usr/share/a,b" {
		t.Errorf("env %q, ro %+v", spec.Env, spec.ReadOnly)
	}
}

// parseRun runs the flag path of `stockade run` (profile, flags, merge,
// validate, Spec) without starting a jail.
func parseRun(args []string) (jail.Spec, error) {
	var spec jail.Spec
	var specErr error
	app := &cli.App{
		Name: "stockade", Writer: &strings.Builder{}, ErrWriter: &strings.Builder{},
		ExitErrHandler: func(*cli.Context, error) {}, DisableSliceFlagSeparator: true,
		Commands: []*cli.Command{{Name: "run", Flags: jailFlags(), Action: func(c *cli.Context) error {
			spec, specErr = specFromFlags(c, c.Args().Slice(), nil)
			return specErr
		}}},
	}
	if err := app.Run(append([]string{"stockade", "run"}, args...)); err != nil {
		return spec, err
	}
	return spec, specErr
}

// FuzzFlags feeds the flag path any value for any flag. It must never
// panic; what it refuses it refuses in lines that each name the flag (one
// per bad item of a comma-separated list: "--allow-private 0,0" gives
// two); and what
// it accepts, the jail accepts too: the profile's validator and the Spec's
// must not disagree.
func FuzzFlags(f *testing.F) {
	var names []string
	for n := range badFlagValues {
		names = append(names, n)
	}
	for i, n := range names {
		for _, v := range badFlagValues[n] {
			f.Add(uint8(i), v)
		}
	}
	f.Add(uint8(0), "1")
	f.Add(uint8(1), "512M")
	f.Fuzz(func(t *testing.T, which uint8, value string) {
		flag := names[int(which)%len(names)]
		spec, err := parseRun([]string{"--" + flag, value, "--", "true"})
		if err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				if !strings.HasPrefix(line, "--"+flag) {
					t.Fatalf("--%s %q: error %q has a line that does not name the flag", flag, value, err)
				}
			}
			return
		}
		if verr := spec.Validate(); verr != nil {
			t.Fatalf("--%s %q: accepted, but the jail refuses the Spec: %v", flag, value, verr)
		}
	})
}

// A bind below /work would make its mount point inside /work, which with
// --workdir is the user's own directory: refused before anything is made.
func TestAttackBindBelowWorkdirPlantsNothing(t *testing.T) {
	dir := t.TempDir()
	for _, dest := range []string{"/work/x", "/work/a/b"} {
		code, _, stderr := invoke(t, "", "run", "--workdir", dir, "--ro", "/usr/share:"+dest, "--", "true")
		if code != jail.ExitJailError || !strings.Contains(stderr, "inside /work") {
			t.Errorf("--ro /usr/share:%s: exit %d, %q", dest, code, stderr)
		}
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
		t.Errorf("the user's directory holds %v (%v), want nothing", ents, err)
	}
}
