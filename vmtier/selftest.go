package vmtier

import (
	"github.com/stockade/stockade/profiles"
	"github.com/stockade/stockade/selftest"
)

// SelftestPlan asks the guest to run the selftest under Profile (its
// isolation the jail's: the guest's jails are the ones attacked), on the
// doors named (all when empty).
type SelftestPlan struct {
	Profile  profiles.Profile `json:"profile"`
	Doors    []string         `json:"doors,omitempty"`
	NoCgroup bool             `json:"no_cgroup,omitempty"`
	// Slowdown is selftest.Options' (emulation: emulatedSlowdown).
	Slowdown int `json:"slowdown,omitempty"`
}

// SelftestReply is the guest's report and the kernel it ran under, as the
// guest says: the host holds both to its own bounds (checkReport).
type SelftestReply struct {
	Report selftest.Report `json:"report"`
	Kernel string          `json:"kernel"`
}
