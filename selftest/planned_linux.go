package selftest

import (
	"slices"
	"time"

	"github.com/stockade/stockade/profiles"
)

// Planned lists the rows a suite under base with opts (its Doors, all
// when empty, and Slowdown) is to report, door and attack in the order it
// runs them, and the sum of their runs' timeouts. A runner that has the suite run where it
// cannot see it (the VM tier runs it in a guest) holds the report it gets
// back to these rows and bounds its wait by that sum.
func Planned(base *profiles.Profile, opts Options) (rows []Row, timeouts time.Duration) {
	for _, a := range Attacks() {
		if len(opts.Doors) > 0 && !slices.Contains(opts.Doors, a.Door) {
			continue
		}
		rows = append(rows, Row{Door: a.Door, Attack: a.Name, Expected: a.Expect})
		p := base.Clone()
		if a.adjust != nil {
			a.adjust(p)
		}
		timeouts += p.Limits.Timeout * opts.slowdown()
	}
	return rows, timeouts
}

// Count sets Passed, Failed and Skipped from the rows.
func (r *Report) Count() {
	r.Passed, r.Failed, r.Skipped = 0, 0, 0
	for _, row := range r.Rows {
		switch row.Status {
		case Pass:
			r.Passed++
		case Fail:
			r.Failed++
		default:
			r.Skipped++
		}
	}
}
