#!/bin/sh
# The "container" case of issue 3, run inside the vmtest VM as root.
#
# Docker with a private cgroup namespace gives a container a cgroup whose
# controllers are available but not enabled for children, with the
# container's PID 1 already in it, and shows that cgroup as "/" on a fresh
# cgroup2 mount. cgroup v2's "no internal processes" rule then forbids child
# cgroups with controllers until every process has left that root, so
# stockade has to move into a leaf before it can limit anything. This script
# builds exactly that and checks stockade still enforces --memory.
#
# Without arguments it builds the container; with --inside it is the
# container's test shell. Exit 0 only if every check passed.
set -u
STOCKADE_BIN=${STOCKADE_BIN:-/usr/local/bin/stockade}
CGROOT=/sys/fs/cgroup
CONTAINER=$CGROOT/container

say() { echo "container: $*"; }

outside() {
	mkdir "$CONTAINER" || exit 1
	# The container's PID 1 stand-in: a process that sits in the root of the
	# namespace for the whole case.
	sleep 100000 &
	holder=$!
	echo "$holder" >"$CONTAINER/cgroup.procs" || exit 1
	# Enter the container's cgroup first: unshare(CLONE_NEWCGROUP) roots the
	# new namespace at the caller's current cgroup. util-linux unshare by
	# path: busybox's has no --cgroup, and its sh prefers its own applets.
	sh -c 'echo $$ >"$1/cgroup.procs" && exec /usr/bin/unshare --cgroup --mount --propagation private sh "$2" --inside' \
		sh "$CONTAINER" "$0"
	rc=$?
	kill "$holder"
	wait "$holder" 2>/dev/null
	[ -f "$CONTAINER/cgroup.kill" ] && echo 1 >"$CONTAINER/cgroup.kill"
	find "$CONTAINER" -depth -type d -exec rmdir {} + 2>/dev/null
	exit "$rc"
}

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

inside() {
	# A fresh cgroup2 mount in this mount namespace shows the namespace root,
	# as Docker's does. The VM's own mount must go first: the kernel refuses
	# the same superblock twice on one mount point.
	umount "$CGROOT" && mount -t cgroup2 cgroup2 "$CGROOT" || exit 1
	say "/proc/self/cgroup: $(cat /proc/self/cgroup)"
	say "root cgroup.procs: $(tr '\n' ' ' <"$CGROOT/cgroup.procs")"
	say "root cgroup.controllers: $(cat "$CGROOT/cgroup.controllers"); subtree_control: '$(cat "$CGROOT/cgroup.subtree_control")'"
	check "we are at the namespace root" [ "$(cat /proc/self/cgroup)" = "0::/" ]
	check "the root already holds another process" [ "$(wc -l <"$CGROOT/cgroup.procs")" -ge 2 ]

	# 0. A plain run works here at all, so a failure below is about cgroups.
	out=$(timeout 120 "$STOCKADE_BIN" run -- python3 -c 'print("jailed", 6 * 7)')
	rc=$?
	say "plain run: exit $rc, output '$out'"
	check "a plain run works inside the container" [ "$rc.$out" = "0.jailed 42" ]

	# 1. stockade leaves the root for a leaf: watch its own cgroup while a
	# short run is in flight.
	"$STOCKADE_BIN" run --memory 64M -- python3 -c 'import time; time.sleep(4)' &
	spid=$!
	seen=0:/
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
	say "stockade's own cgroup during a run: $seen (run exit $src)"
	say "root after the run: subtree_control '$(cat "$CGROOT/cgroup.subtree_control")', children: $(find "$CGROOT" -mindepth 1 -type d | sed "s|^$CGROOT||" | tr '\n' ' ')"
	check "stockade moved itself out of the namespace root into a leaf" [ "$seen" != 0:/ ]
	check "the sleeping run exited 0" [ "$src" -eq 0 ]

	# 2. The memory limit still holds: a 200 MiB allocation under --memory
	# 64M is OOM-killed.
	out=$(timeout 120 "$STOCKADE_BIN" run --memory 64M --json -- python3 -c 'bytearray(200 << 20)')
	rc=$?
	verdict=$(printf '%s' "$out" | json_field verdict)
	say "memory bomb: exit $rc, verdict '$verdict'"
	say "memory bomb JSON: $out"
	killed=no
	if [ "$rc" -eq 137 ] || [ "$verdict" = memory ]; then killed=yes; fi
	check "200 MiB under --memory 64M is OOM-killed (exit 137 or verdict memory)" [ "$killed" = yes ]

	# 3. Nothing left behind.
	left=$(find "$CGROOT" -mindepth 1 -type d -name 'stockade-*' | sed "s|^$CGROOT||" | tr '\n' ' ')
	check "no stockade-* cgroup left after the runs (found: '$left')" [ -z "$left" ]
	exit $((failures > 0))
}

case "${1:-}" in
--inside) inside ;;
*) outside ;;
esac
