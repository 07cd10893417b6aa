package main

import (
	"os"
	"strings"
	"testing"

	"github.com/stockade/stockade/profiles"
	"github.com/urfave/cli/v2"
)

// The defaults live once, in the built-in python profile. The flags' help
// and the flag table of docs/cli.md say them again for the reader; this test
// holds all three to the profile.
func TestDocumentedDefaultsAreThePythonProfiles(t *testing.T) {
	def := profiles.Defaults()
	readme, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]string{}
	for _, line := range strings.Split(string(readme), "\n") {
		cols := strings.Split(strings.ReplaceAll(line, `\|`, "/"), "|")
		if len(cols) < 4 || !strings.HasPrefix(strings.TrimSpace(cols[1]), "`--") {
			continue
		}
		name := strings.Fields(strings.Trim(strings.TrimSpace(cols[1]), "`-"))[0]
		if v := strings.Split(cols[2], "`"); len(v) >= 3 {
			documented[strings.TrimSuffix(name, "`")] = v[1]
		}
	}
	help := map[string]string{}
	for _, f := range jailFlags() {
		if sf, ok := f.(*cli.StringFlag); ok {
			help[sf.Name] = sf.DefaultText
		}
	}
	for _, f := range policyFlags {
		want := def.Text(f.field)
		if got, ok := documented[f.name]; !ok || got != want {
			t.Errorf("docs/cli.md: --%s default %q, the python profile's %s is %q", f.name, got, f.field, want)
		}
		if help[f.name] != want {
			t.Errorf("help: --%s default %q, the python profile's %s is %q", f.name, help[f.name], f.field, want)
		}
	}
}
