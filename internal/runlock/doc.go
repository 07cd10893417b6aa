// Package runlock proves which stockade owns what on a host.
//
// Every run takes a slot: a file in one host-wide lock directory
// (/run/stockade/runs for root), flock(2)ed for the run's whole life. Before
// a run creates anything on the host (its run directory, its cgroup in each
// hierarchy) it writes the paths into its slot file. A stockade that dies,
// even by SIGKILL, drops the flock with its last file descriptor; the kernel
// does that, not the dead process. So a slot whose lock can be taken belongs
// to nobody, and what its record lists is provably a leftover: the next
// stockade to start, from any cgroup parent, in any pid namespace, kills and
// removes it. A slot whose lock is held is live and is never touched.
//
// The slot number is also the run's identity on the host (see
// jail.HostIDFor): two runs that hold slots at once never share it, and a
// slot is handed out again only after everything of its previous run is gone.
package runlock
