package server

import (
	"github.com/stockade/stockade/api"
	"github.com/stockade/stockade/jail"
	"github.com/stockade/stockade/profiles"
	"github.com/stockade/stockade/server/internal/kernel"
)

// requestSpec is the spec of the jail that serves a request for profile
// name with limits: the profile's own when there are none, else the
// limits laid over it (tighten only) and validated, as a flag's or a
// file's value would be. The errors are 422s naming the field.
func (s *Server) requestSpec(name string, limits api.Limits) (jail.Spec, error) {
	return s.layeredSpec(s.policies[name], s.specs[name], limits)
}

// sessionRequestSpec is requestSpec for a session: its limits laid over
// the profile as sessions have it (the session layers over the profile).
func (s *Server) sessionRequestSpec(name string, limits api.Limits) (jail.Spec, error) {
	return s.layeredSpec(s.sessionPolicies[name], s.sessionSpecs[name], limits)
}

func (s *Server) layeredSpec(policy *profiles.Profile, spec jail.Spec, limits api.Limits) (jail.Spec, error) {
	if len(limits) == 0 {
		return spec, nil
	}
	layer, err := limitsLayer(limits)
	if err != nil {
		return jail.Spec{}, err
	}
	merged, err := profiles.Tighten(policy, layer)
	if err == nil {
		err = merged.Validate()
	}
	if err != nil {
		return jail.Spec{}, &api.Error{Status: 422, Msg: joinErrors(err)}
	}
	return merged.Spec(kernel.Args(), s.cfg.Host), nil
}
