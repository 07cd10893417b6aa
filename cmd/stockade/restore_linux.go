package main

import (
	"fmt"
	"io"

	"github.com/stockade/stockade/cgroup"
)

// restoreCgroup runs as stockade exits: on cgroup v2 it undoes the leaf a
// run or doctor moved it into, when no other stockade uses the cgroup, so
// that a systemd unit's next Exec*= process (ExecStartPre=stockade doctor,
// then ExecStart=) can start in the unit's cgroup (else 219/CGROUP).
func restoreCgroup(stderr io.Writer) {
	what, err := cgroup.Restore()
	if err != nil {
		fmt.Fprintf(stderr, "stockade: %v\n", err)
	} else if what != "" {
		fmt.Fprintf(stderr, "stockade: %s\n", what)
	}
}
