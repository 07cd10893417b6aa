// Package cgroup gives every stockade run its own cgroup with hard memory,
// CPU and pids limits, reads back what the run used, and kills and removes
// the group afterwards.
//
// It works on both cgroup worlds: the unified cgroup v2 hierarchy, and the
// v1 (legacy or hybrid) layout where memory, cpu, cpuacct, pids and freezer
// are separate hierarchies, each with its own place for our process. Groups
// are created only below the cgroup stockade itself runs in (or below an
// explicit parent), so stockade needs nothing but a delegated subtree.
//
// Creating a group and writing its limits go through
// github.com/containerd/cgroups/v3 (cgroup1 and cgroup2). The per-run hot
// path (placing a process, reading usage, killing, removing) is a handful of
// direct file operations, because a jail run should cost almost nothing
// beyond the jailed program itself.
//
// The package never decides on its own that a group is stale. Who owns a
// group is recorded outside the cgroupfs, in the run's slot of package
// runlock, before the group is made; a stockade that finds a slot whose
// lock is free (its owner is dead) hands the recorded directories to
// RemoveStale.
package cgroup
