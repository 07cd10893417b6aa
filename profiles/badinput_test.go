package profiles

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// badFileValues are, per profile field, TOML values that must be refused:
// zero where zero means nothing, negative, huge, a missing unit, the wrong
// type, relative, "..", NUL, reserved paths. Each is written as the only
// field of a file extending python, on line 3.
var badFileValues = map[Field][]string{
	FieldTimeout:   {"0", `"0s"`, "-1", `"-1s"`, `"soon"`, `"10 parsecs"`, `""`, "99999999999", `"9999999999h"`, "inf", "nan", "true", "[1]"},
	FieldCPUTime:   {"-1", `"-1s"`, `"later"`, "nan", "99999999999", "false"},
	FieldMemory:    {"0", "1", `"1"`, `"4095K"`, "-1", `"-512M"`, `"lots"`, `""`, `"9999999T"`, "1.5", "true"},
	FieldSwap:      {"-1", `"lots"`, `"9999999T"`, "1.5"},
	FieldCPUs:      {"0", "0.0", "-1", "nan", "inf", "-inf", "1025", `"1"`, "true"},
	FieldPids:      {"0", "-1", "1", "15", "4194305", "9223372036854775807", "1.5", `"64"`, "true"},
	FieldOpenFiles: {"0", "2", "-1", "1048577", `"256"`, "1.5"},
	FieldFileSize:  {"-1", `"lots"`, `"9999999T"`, "true"},
	FieldOutput:    {"0", "-1", `"0"`, `"lots"`, `"9999999T"`},
	FieldTmpfsSize: {"0", "-1", `"lots"`, `"9999999T"`},
	FieldWorkSize:  {"0", "-1", `"lots"`, `"9999999T"`},
	FieldRootfs:    {`""`, `"root"`, `"./root"`, `"/srv/../etc"`, `"/srv/root/"`, `"/srv/\u0000root"`, "1"},
	FieldWorkdir:   {`""`, `"work"`, `"/"`, `"/srv/../etc"`, `"/srv/work/"`, `"/srv/\u0000work"`, "true"},
	FieldNoexec:    {`"yes"`, "1"},
	FieldIsolation: {`""`, `"VM"`, `"kvm"`, `"container"`, "1", "true"},
	FieldVMEmulate: {`"yes"`, "1"},
	FieldRO: {`"/x"`, `[""]`, `["rel:/x"]`, `["/usr/share:rel"]`, `["/usr/share:/"]`, `["/usr/share:/work"]`,
		`["/usr/share:/work/x"]`, `["/usr/share:/proc/1"]`, `["/usr/share:/dev"]`, `["/usr/share:/sys/fs"]`,
		`["/usr/share:/tmp"]`, `["/usr/share:/etc/passwd"]`, `["/usr/../etc:/x"]`, `["/usr/share:/x/../y"]`,
		`["/usr/\u0000share:/x"]`, `["/a:/m", "/b:/m"]`, `[1]`},
	FieldEnvVars:       {`{ "1A" = "x" }`, `{ "A-B" = "x" }`, `{ "" = "x" }`, `{ A = "\u0000" }`, `{ A = 1.5 }`, `{ A = "1", A = "2" }`, `"A=1"`},
	FieldSeccompPolicy: {`""`, `"none"`, `"Python"`, "1"},
	FieldNetworkMode:   {`""`, `"host"`, "true"},
	FieldNetworkAllow: {`"pypi.org"`, `[""]`, `["exa mple.org"]`, `["a\u0000b.org"]`, `["*.com"]`, `["pypi.org:0"]`,
		`["user@pypi.org"]`, `["fe80::1%eth0"]`, `["pypi.org", 1]`},
	FieldNetworkAllowPrivate: {`"10.0.0.0/8"`, `["127.0.0.1"]`, `["169.254.169.254/32"]`, `["::1"]`, `["ten"]`, `[10]`},
	FieldNetworkMaxTunnels:   {"0", "-1", "4097", `"32"`, "1.5"},
	FieldNetworkMaxUpload:    {"0", "-1", `"lots"`, `"9999999T"`},
	FieldNetworkMaxDownload:  {"0", "-1", `"lots"`, `"9999999T"`},
}

// Every bad value in a file: an error naming the file, the line and the
// field, and one line of it.
func TestBadFileValuesNameFileLineAndField(t *testing.T) {
	dir := t.TempDir()
	for field, values := range badFileValues {
		table, key, _ := strings.Cut(string(field), ".")
		for i, v := range values {
			file := filepath.Join(dir, fmt.Sprintf("%s-%d.toml", strings.ReplaceAll(string(field), ".", "-"), i))
			src := fmt.Sprintf("extends = \"python\"\n[%s]\n%s = %s\n", table, key, v)
			if key == "" {
				// A top-level field: no table, on the same line 3.
				src = fmt.Sprintf("extends = \"python\"\n\n%s = %s\n", table, v)
			}
			if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Load(file, nil)
			want := file + ":3: " + string(field)
			if strings.Contains(v, `A = "1", A = "2"`) {
				want = file + ":3: invalid TOML: Key 'environment.vars.A' has already been defined"
			}
			if err == nil || strings.Contains(err.Error(), "\n") || !strings.HasPrefix(err.Error(), want) {
				t.Errorf("%s = %s: %v; want one line starting %q", field, v, err, want)
			}
		}
	}
	for _, f := range Fields() {
		if _, ok := badFileValues[f]; !ok && f != FieldExtends && f != FieldDescription {
			t.Errorf("no bad values tried for %s", f)
		}
	}
}
