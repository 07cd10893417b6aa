package jail

import (
	"context"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/stockade/stockade/jail/internal/jailinit"
)

// A Provider adds to a jail what its host keeps for it beyond any policy:
// package pydata's matplotlib font cache, built once per root and bound
// read-only, is one. The jail knows nothing of what a provision is for; it
// applies it as plain mount steps, checked as the rest of the plan is.
// Host.Providers are asked once per run, in order, while the run is
// prepared (a pooled jail's, when it is prepared).
type Provider interface {
	// Provide returns what to add to a jail of spec. An error fails the
	// run (nothing half-applied); a provider whose provision is only an
	// optimisation says its trouble on notices and returns none instead.
	Provide(ctx context.Context, spec Spec, notices io.Writer) (Provision, error)
}

// Provision is what a Provider adds to a jail.
type Provision struct {
	// Binds are host directories bound read-only. The provider vouches
	// for each source: it must be a directory only stockade's own user
	// can write (pydata checks its cache so), since its owner could
	// otherwise change what every jail reads.
	Binds []Bind
	// Dirs are empty directories made on the jail's /tmp (mode 0755).
	Dirs []string
	// Links are symlinks made on the jail's /tmp.
	Links []Link
	// Env is KEY=VALUE for the payload; a Spec.Env entry of the same name
	// replaces it.
	Env []string
}

// Link is a symlink in the jail: Dest points at Target.
type Link struct{ Dest, Target string }

// provisions asks the host's providers and turns what they give into mount
// steps (applied after /proc and /tmp exist) and environment.
func provisions(ctx context.Context, spec Spec, notices io.Writer) ([]jailinit.Step, []string, error) {
	var steps []jailinit.Step
	var env []string
	for _, pr := range spec.Host.Providers {
		if pr == nil {
			continue
		}
		got, err := pr.Provide(ctx, spec, notices)
		if err != nil {
			return nil, nil, err
		}
		if err := got.check(); err != nil {
			return nil, nil, fmt.Errorf("%T: %w", pr, err)
		}
		for _, b := range got.Binds {
			steps = append(steps, jailinit.Step{Kind: jailinit.StepBind, Dest: b.Dest, Source: b.Source, Dir: true})
		}
		for _, d := range got.Dirs {
			steps = append(steps, jailinit.Step{Kind: jailinit.StepDir, Dest: d, Mode: 0o755})
		}
		for _, l := range got.Links {
			steps = append(steps, jailinit.Step{Kind: jailinit.StepSymlink, Dest: l.Dest, Link: l.Target})
		}
		env = append(env, got.Env...)
	}
	return steps, env, nil
}

// check refuses a provision that would reach past what a provider may
// add: a bind onto a path stockade manages (CheckBindDest) or from a
// relative source, a directory or link outside the jail's /tmp, a
// variable that is not KEY=VALUE.
func (p Provision) check() error {
	for _, b := range p.Binds {
		if !isClean(b.Source) {
			return fmt.Errorf("bind source %q must be an absolute, clean path", b.Source)
		}
		if err := CheckBindDest(b.Dest); err != nil {
			return err
		}
	}
	for _, d := range p.Dirs {
		if !isClean(d) || !strings.HasPrefix(d, "/tmp/") {
			return fmt.Errorf("directory %q must be a clean path below /tmp", d)
		}
	}
	for _, l := range p.Links {
		if !isClean(l.Dest) || !strings.HasPrefix(l.Dest, "/tmp/") || l.Target == "" || strings.IndexByte(l.Target, 0) >= 0 {
			return fmt.Errorf("link %q -> %q must be a clean path below /tmp to a target", l.Dest, l.Target)
		}
	}
	for _, kv := range p.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" || strings.IndexByte(kv, 0) >= 0 {
			return fmt.Errorf("env %q: want KEY=VALUE", kv)
		}
	}
	return nil
}

func isClean(p string) bool {
	return path.IsAbs(p) && path.Clean(p) == p && strings.IndexByte(p, 0) < 0
}
