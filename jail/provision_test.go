package jail

import (
	"context"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/stockade/stockade/jail/internal/jailinit"
)

type fakeProvider struct {
	p   Provision
	err error
}

func (f fakeProvider) Provide(context.Context, Spec, io.Writer) (Provision, error) { return f.p, f.err }

// A provision is plain mount steps: read-only directory binds, directories
// and links on /tmp, variables; each provider's in turn.
func TestProvisionsBecomeSteps(t *testing.T) {
	spec := Spec{Host: Host{Providers: []Provider{
		fakeProvider{p: Provision{Binds: []Bind{{Source: "/var/cache/x", Dest: "/run/stockade/x"}}, Dirs: []string{"/tmp/x"},
			Links: []Link{{Dest: "/tmp/x/f", Target: "/run/stockade/x/f"}}, Env: []string{"X=1"}}},
		nil,
		fakeProvider{p: Provision{Env: []string{"Y=2"}}},
	}}}
	steps, env, err := provisions(context.Background(), spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []jailinit.Step{
		{Kind: jailinit.StepBind, Dest: "/run/stockade/x", Source: "/var/cache/x", Dir: true},
		{Kind: jailinit.StepDir, Dest: "/tmp/x", Mode: 0o755},
		{Kind: jailinit.StepSymlink, Dest: "/tmp/x/f", Link: "/run/stockade/x/f"},
	}
	if !reflect.DeepEqual(steps, want) || !reflect.DeepEqual(env, []string{"X=1", "Y=2"}) {
		t.Errorf("steps %+v env %q", steps, env)
	}
	for _, s := range steps {
		if s.Writable || s.Exec || s.Device {
			t.Errorf("%s: a provision is read-only, noexec, nodev: %+v", s.Dest, s)
		}
	}
}

// TestAttackProvisionReachesPastTmp: a provider cannot bind over what
// stockade mounts itself, nor make directories or links outside the
// jail's /tmp (a link at /etc/x, a directory over /work), nor pass a
// broken variable; and its error fails the run, naming it.
func TestAttackProvisionReachesPastTmp(t *testing.T) {
	for name, p := range map[string]Provision{
		"bind over /proc":     {Binds: []Bind{{Source: "/var/cache/x", Dest: "/proc/self"}}},
		"bind over /etc/pass": {Binds: []Bind{{Source: "/var/cache/x", Dest: "/etc/passwd"}}},
		"relative source":     {Binds: []Bind{{Source: "cache", Dest: "/run/x"}}},
		"unclean source":      {Binds: []Bind{{Source: "/var/../etc", Dest: "/run/x"}}},
		"dir on /work":        {Dirs: []string{"/work/x"}},
		"dir is /tmp":         {Dirs: []string{"/tmp"}},
		"dir climbs out":      {Dirs: []string{"/tmp/../etc"}},
		"link in /etc":        {Links: []Link{{Dest: "/etc/ld.so.preload", Target: "/tmp/x"}}},
		"link with no target": {Links: []Link{{Dest: "/tmp/x"}}},
		"variable":            {Env: []string{"NOVALUE"}},
	} {
		spec := Spec{Host: Host{Providers: []Provider{fakeProvider{p: p}}}}
		if _, _, err := provisions(context.Background(), spec, nil); err == nil || !strings.Contains(err.Error(), "jail.fakeProvider") {
			t.Errorf("%s: %v, want a refusal naming the provider", name, err)
		}
	}
	boom := errors.New("boom")
	spec := Spec{Host: Host{Providers: []Provider{fakeProvider{err: boom}}}}
	if _, _, err := provisions(context.Background(), spec, nil); !errors.Is(err, boom) {
		t.Errorf("a provider's error: %v", err)
	}
}
