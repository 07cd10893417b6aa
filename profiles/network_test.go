package profiles

import (
	"strings"
	"testing"

	"github.com/stockade/stockade/jail"
)

// TestNetworkAllowFromFileAndFlags: [network] allow reaches the Spec, and a
// flag layer replaces the file's list rather than adding to it.
func TestNetworkAllowFromFileAndFlags(t *testing.T) {
	src := "extends = \"python\"\n[network]\nallow = [\"pypi.org\", \"*.pythonhosted.org\"]\nallow_private = [\"10.20.0.0/16\"]\nmax_tunnels = 4\nmax_upload = \"1M\"\n"
	file, err := Parse("mine.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	merged := Merge(Defaults(), file)
	if err := merged.Validate(); err != nil {
		t.Fatal(err)
	}
	s := merged.Spec([]string{"true"}, jail.Host{})
	n := s.Network
	if strings.Join(n.Allow, ",") != "pypi.org,*.pythonhosted.org" || strings.Join(n.AllowPrivate, ",") != "10.20.0.0/16" ||
		n.MaxTunnels != 4 || n.MaxUpload != 1<<20 || n.MaxDownload != 4<<30 {
		t.Fatalf("spec network %+v", n)
	}
	flags := &Profile{Name: "flags"}
	if err := flags.Set(FieldNetworkAllow, "example.org:80,api.example.com", Origin{File: "--allow-net"}); err != nil {
		t.Fatal(err)
	}
	over := Merge(merged, flags)
	if got := strings.Join(over.Spec(nil, jail.Host{}).Network.Allow, ","); got != "example.org:80,api.example.com" {
		t.Fatalf("flags over file: %q", got)
	}
	if got := Defaults().Spec(nil, jail.Host{}).Network; got.Enabled() {
		t.Fatalf("the default profile has a network: %+v", got)
	}
}

func TestNetworkRulesValidatedWhereTheyCameFrom(t *testing.T) {
	src := "[network]\nallow = [\"pypi.org\", \"bad name.org\"]\nallow_private = [\"169.254.169.254\"]\n"
	file, err := Parse("mine.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	err = Merge(Defaults(), file).Validate()
	for _, want := range []string{"mine.toml:2: network.allow[1]:", "mine.toml:3: network.allow_private[0]:", "never reachable"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want %q", err, want)
		}
	}
	flags := &Profile{Name: "flags"}
	_ = flags.Set(FieldNetworkAllow, "exa\x00mple.com", Origin{File: "--allow-net"})
	if err := Merge(Defaults(), flags).Validate(); err == nil || !strings.Contains(err.Error(), "--allow-net: network rule") {
		t.Errorf("NUL in --allow-net: %v", err)
	}
}
