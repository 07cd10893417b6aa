package selftest

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Status is how one attack came out.
type Status string

// Row statuses. Skip is for an attack that does not apply to the base spec
// (no default route to attack, exec in /work allowed by the profile); it
// does not make the report fail.
const (
	Pass Status = "PASS"
	Fail Status = "FAIL"
	Skip Status = "SKIP"
)

// Row is one attack's line in the report.
type Row struct {
	Door     string  `json:"door"`
	Attack   string  `json:"attack"`
	Expected string  `json:"expected"`
	Happened string  `json:"happened"`
	Status   Status  `json:"status"`
	WallMs   float64 `json:"wall_ms"`
	// Output is the tail of the attack's stdout and stderr, kept only for a
	// failed row so that the reader can see what the program saw.
	Output string `json:"output,omitempty"`
}

// Report is the outcome of a suite: one row per attack.
type Report struct {
	Seccomp string `json:"seccomp"`
	Cgroup  string `json:"cgroup"`
	Rows    []Row  `json:"rows"`
	Passed  int    `json:"passed"`
	Failed  int    `json:"failed"`
	Skipped int    `json:"skipped"`
	// Error is set when the suite could not set up its host fixtures; then
	// no door has been shown to hold.
	Error string `json:"error,omitempty"`
	// NoJail is set, with Error, when not even a harmless jail could start
	// under the base spec: nothing was tested, no door is known open.
	NoJail bool `json:"no_jail,omitempty"`
	// Isolation is "vm" when the suite ran in a guest of the VM tier
	// (its jails inside the guest, under the guest's kernel, named by
	// Kernel as the guest reported it); empty for the jail tier.
	Isolation string `json:"isolation,omitempty"`
	Kernel    string `json:"kernel,omitempty"`
}

// OK reports whether every door held: no row failed and the suite ran.
func (r *Report) OK() bool { return r.Error == "" && r.Failed == 0 && r.Passed > 0 }

func (r *Report) add(row Row) {
	r.Rows = append(r.Rows, row)
	switch row.Status {
	case Pass:
		r.Passed++
	case Fail:
		r.Failed++
	default:
		r.Skipped++
	}
}

// Row returns the first row for the attack named name, or nil.
func (r *Report) Row(name string) *Row {
	for i := range r.Rows {
		if r.Rows[i].Attack == name {
			return &r.Rows[i]
		}
	}
	return nil
}

// WriteTable prints the report as an aligned table, with the output of each
// failed attack below it.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DOOR\tATTACK\tEXPECTED\tHAPPENED\tRESULT")
	for _, row := range r.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", row.Door, row.Attack, row.Expected, oneLine(row.Happened, 110), row.Status)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, row := range r.Rows {
		if row.Status == Fail && row.Output != "" {
			fmt.Fprintf(w, "\n--- FAIL %s / %s: the attack's output\n%s\n", row.Door, row.Attack, strings.TrimRight(row.Output, "\n"))
		}
	}
	if r.NoJail {
		_, err := fmt.Fprintf(w, "could not start a jail: %s\nnothing was tested\n", r.Error)
		return err
	}
	if r.Error != "" {
		fmt.Fprintf(w, "\nselftest could not run: %s\n", r.Error)
	}
	verdict := "every door held"
	if !r.OK() {
		verdict = "DOORS OPEN"
	}
	tier := ""
	if r.Isolation != "" {
		tier = fmt.Sprintf(", isolation %s, guest kernel %s", r.Isolation, r.Kernel)
	}
	_, err := fmt.Fprintf(w, "\n%d passed, %d failed, %d skipped (seccomp %s, cgroup %s%s): %s\n",
		r.Passed, r.Failed, r.Skipped, r.Seccomp, r.Cgroup, tier, verdict)
	return err
}

// WriteJSON prints the report as one JSON object.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > max {
		s = s[:max-3] + "..."
	}
	return s
}
