#!/bin/sh
# The "container" case of issue 3, run inside the vmtest VM as root.
#
# Docker with a private cgroup namespace gives a container a cgroup whose
# controllers are available but not enabled for children, and shows that
# cgroup as "/" on a fresh cgroup2 mount. cgroup v2's "no internal
# processes" rule forbids enabling controllers for children of a non-root
# cgroup while any process is in it, so stockade has to get the root empty
# (move into a leaf) before it can limit anything. Two containers:
#
#   alone:  stockade is the container's only process, as in
#           `docker run IMAGE stockade run ...`;
#   shared: the root also holds the container's PID 1 (a sleep here) and
#           the shell that calls stockade, as when a service in a
#           container runs stockade per request.
#
# Each checks that stockade leaves the root for a leaf and that
# `--memory 64M` still OOM-kills a 200 MiB allocation (exit 137 or verdict
# "memory"), and that no stockade-* cgroup is left. Exit 0 only if every
# check passed. With --inside it is the shared container's test shell;
# --enter DIR CMD... runs CMD as the only process of a container at DIR.
set -u
STOCKADE_BIN=${STOCKADE_BIN:-/usr/local/bin/stockade}
CGROOT=/sys/fs/cgroup
BOMB='bytearray(200 << 20)'

say() { echo "container: $*"; }

failures=0
check() { # DESCRIPTION COMMAND...
	desc=$1
	shift
	if "$@"; then
		say "ok: $desc"
	else
		say "FAILED: $desc"
		failures=$((failures + 1))
	fi
}

json_field() { # FIELD <JSON
	python3 -c 'import json, sys
try:
    print(json.load(sys.stdin).get(sys.argv[1], ""))
except Exception as e:
    print("unparsable:", e)' "$1"
}

# check_oom LABEL EXIT JSON: the memory bomb ended in an OOM kill.
check_oom() {
	verdict=$(printf '%s' "$3" | json_field verdict)
	say "$1 memory bomb: exit $2, verdict '$verdict'"
	say "$1 memory bomb JSON: $(printf '%s' "$3" | cut -c1-400)"
	killed=no
	if [ "$2" -eq 137 ] || [ "$verdict" = memory ]; then killed=yes; fi
	check "$1: 200 MiB under --memory 64M is OOM-killed (exit 137 or verdict memory)" [ "$killed" = yes ]
}

# check_no_leftovers LABEL DIR
check_no_leftovers() {
	left=$(find "$2" -mindepth 1 -type d -name 'stockade-*' | sed "s|^$2||" | tr '\n' ' ')
	check "$1: no stockade-* cgroup left after the runs (found: '$left')" [ -z "$left" ]
}

# children_with_procs DIR: "path:pids" of each cgroup below DIR holding
# processes.
children_with_procs() {
	find "$1" -mindepth 1 -type d | while read -r dir; do
		procs=$(tr '\n' ' ' <"$dir/cgroup.procs" 2>/dev/null)
		[ -n "$procs" ] && echo "${dir#"$1"}:$procs"
	done | tr '\n' ' '
}

# enter_container DIR CMD...: run CMD as the only process of a new cgroup
# namespace rooted at DIR, in its own mount namespace with a fresh cgroup2
# mount at /sys/fs/cgroup, as Docker sets one up. The shell enters DIR
# before unshare(CLONE_NEWCGROUP), which roots the namespace at the caller's
# cgroup; util-linux unshare by path, since busybox's has no --cgroup and
# its sh runs applets before PATH. The VM's own cgroup2 mount goes first:
# the kernel refuses the same superblock twice on one mount point.
enter_container() {
	dir=$1
	shift
	sh -c 'echo $$ >"$1/cgroup.procs" && shift &&
		exec /usr/bin/unshare --cgroup --mount --propagation private \
			sh -c "umount /sys/fs/cgroup && mount -t cgroup2 cgroup2 /sys/fs/cgroup && exec \"\$@\"" sh "$@"' \
		sh "$dir" "$@"
}

remove_container() {
	[ -f "$1/cgroup.kill" ] && echo 1 >"$1/cgroup.kill"
	find "$1" -depth -type d -exec rmdir {} + 2>/dev/null
}

alone() {
	cg=$CGROOT/container-alone
	mkdir "$cg" || return
	out=/tmp/container-alone.json
	timeout 120 sh "$0" --enter "$cg" "$STOCKADE_BIN" run --memory 64M --json -- python3 -c "$BOMB" >"$out" &
	job=$!
	root_emptied=no
	seen=
	tries=0
	while kill -0 "$job" 2>/dev/null && [ "$tries" -lt 600 ]; do
		below=$(children_with_procs "$cg")
		if [ -n "$below" ] && [ -z "$(cat "$cg/cgroup.procs")" ]; then
			root_emptied=yes
			seen=$below
		fi
		tries=$((tries + 1))
		usleep 50000
	done
	wait "$job"
	rc=$?
	say "alone: processes below the container root during the run: ${seen:-none seen}"
	check "alone: stockade left the container root for a leaf" [ "$root_emptied" = yes ]
	check_oom alone "$rc" "$(cat "$out")"
	check_no_leftovers alone "$cg"
	remove_container "$cg"
}

shared() {
	cg=$CGROOT/container-shared
	mkdir "$cg" || return
	# The container's PID 1 stand-in, in the root for the whole case.
	sleep 100000 &
	holder=$!
	echo "$holder" >"$cg/cgroup.procs" || return
	enter_container "$cg" sh "$0" --inside
	rc=$?
	kill "$holder"
	wait "$holder" 2>/dev/null
	remove_container "$cg"
	[ "$rc" -eq 0 ] || failures=$((failures + rc))
}

# inside is the shared container's shell, at the root of its namespace.
inside() {
	say "shared: /proc/self/cgroup: $(cat /proc/self/cgroup)"
	say "shared: root cgroup.procs: $(tr '\n' ' ' <"$CGROOT/cgroup.procs")"
	say "shared: root cgroup.controllers: $(cat "$CGROOT/cgroup.controllers"); subtree_control: '$(cat "$CGROOT/cgroup.subtree_control")'"
	check "shared: we are at the namespace root" [ "$(cat /proc/self/cgroup)" = "0::/" ]
	check "shared: the root already holds another process" [ "$(wc -l <"$CGROOT/cgroup.procs")" -ge 2 ]

	# Watch stockade's own cgroup while a short run is in flight.
	"$STOCKADE_BIN" run --memory 64M -- python3 -c 'import time; time.sleep(4)' &
	spid=$!
	seen=/
	tries=0
	while [ "$tries" -lt 300 ] && [ -r "/proc/$spid/cgroup" ]; do
		now=$(cut -d: -f3 "/proc/$spid/cgroup" 2>/dev/null)
		if [ -n "$now" ] && [ "$now" != / ]; then
			seen=$now
			break
		fi
		tries=$((tries + 1))
		usleep 50000
	done
	wait "$spid"
	src=$?
	say "shared: stockade's own cgroup during a run: $seen (run exit $src)"
	say "shared: root after the run: subtree_control '$(cat "$CGROOT/cgroup.subtree_control")', children: $(find "$CGROOT" -mindepth 1 -type d | sed "s|^$CGROOT||" | tr '\n' ' ')"
	check "shared: stockade moved itself out of the namespace root into a leaf" [ "$seen" != / ]
	check "shared: a limited run exits 0" [ "$src" -eq 0 ]

	out=$(timeout 120 "$STOCKADE_BIN" run --memory 64M --json -- python3 -c "$BOMB")
	check_oom shared $? "$out"
	check_no_leftovers shared "$CGROOT"
	exit "$failures"
}

case "${1:-}" in
--inside) inside ;;
--enter)
	shift
	enter_container "$@"
	exit
	;;
esac

# First: a plain run works in the VM at all, so a failure below is about
# cgroups, not the jail.
out=$(timeout 120 "$STOCKADE_BIN" run -- python3 -c 'print("jailed", 6 * 7)')
rc=$?
say "plain run in the VM: exit $rc, output '$out'"
check "a plain run works in the VM" [ "$rc.$out" = "0.jailed 42" ]
alone
# VMTEST_CONTAINER=alone leaves the shared container out.
[ "${VMTEST_CONTAINER:-1}" = alone ] || shared
say "$failures checks failed"
exit $((failures > 0))
