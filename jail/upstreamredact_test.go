package jail

import (
	"strings"
	"testing"
)

// TestAttackUpstreamProxyPasswordInErrors: a malformed HTTPS_PROXY is
// refused with the value shown redacted. But url.Parse takes a proxy given
// without its scheme, "user:password@host:port", as the scheme "user" and
// an opaque rest, which Redacted prints whole: the password went into the
// error, and so into a terminal, a CI log or serve's journal.
func TestAttackUpstreamProxyPasswordInErrors(t *testing.T) {
	for _, proxy := range []string{
		"corpuser:corppass@proxy.example:3128",
		"corpuser:corppass@[::1",
		"https://corpuser:corppass@proxy.example:3128",
		"http://corpuser:corppass@",
		"http://corpuser:corppass@proxy.example:3128/%zz",
	} {
		s := testSpec("true")
		s.Network.Allow = []string{"example.org"}
		s.Host.UpstreamProxy = proxy
		err := s.Validate()
		if err == nil {
			t.Errorf("upstream %q: accepted", proxy)
			continue
		}
		if strings.Contains(err.Error(), "corppass") {
			t.Errorf("upstream %q: the error shows its password: %v", proxy, err)
		}
	}
}
