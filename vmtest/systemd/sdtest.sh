#!/bin/sh
# Runs inside the VM, as a systemd service, under systemd as PID 1 on
# cgroup v2. Prints SDTEST ok|FAILED lines and SDTEST DONE, then powers off.
export PATH=/usr/local/bin:/usr/bin:/usr/sbin
pass=0
fail=0
ok() { echo "SDTEST ok: $*"; pass=$((pass + 1)); }
bad() { echo "SDTEST FAILED: $*"; fail=$((fail + 1)); }
field() { python3 -c 'import json,sys
try: print(json.load(open(sys.argv[1])).get(sys.argv[2]))
except Exception as e: print("unreadable:", e)' "$1" "$2"; }
# A check reads a result file only once the process writing it has exited:
# a file that exists and is not empty may still be mid-write, or about to
# be truncated by a later ExecStart= of the same unit.
# finished UNIT SECONDS: until UNIT runs nothing any more (a transient unit
# that is gone reads inactive).
finished() {
	i=0
	while :; do
		case $(systemctl show -p ActiveState --value "$1") in inactive | failed) return 0 ;; esac
		[ $i -ge "$2" ] && return 1
		sleep 1; i=$((i + 1))
	done
}
# ran_anew UNIT INVOCATION SECONDS: until UNIT has been started again (an
# InvocationID other than INVOCATION, the one before) and has finished.
ran_anew() {
	i=0
	while :; do
		inv=$(systemctl show -p InvocationID --value "$1")
		if [ -n "$inv" ] && [ "$inv" != "$2" ]; then
			case $(systemctl show -p ActiveState --value "$1") in inactive | failed) return 0 ;; esac
		fi
		[ $i -ge "$3" ] && return 1
		sleep 1; i=$((i + 1))
	done
}
succeeded() { [ "$(systemctl show -p Result --value "$1")" = success ]; }
leftovers() { # nothing of stockade's may be left: cgroups, processes, run dirs
	cg=$(find /sys/fs/cgroup -name 'stockade*' -type d 2>/dev/null | head -3)
	pr=$(pgrep -a -f 'stockade-init|sleep-marker' | head -3)
	# run directories r<slot>-<pid>-<random>: root's in /run/stockade/dirs,
	# a user's in $XDG_RUNTIME_DIR/stockade/dirs or $TMPDIR/stockade-UID/dirs
	rd=$(find /run/stockade /run/user /tmp /var/tmp -mindepth 2 -maxdepth 4 -type d -name 'r[0-9]*' -path '*stockade*' 2>/dev/null | head -3)
	echo "$cg$pr$rd"
}
echo "SDTEST START systemd $(systemctl --version | head -1) cgroup $(stat -fc %T /sys/fs/cgroup)"
useradd --create-home --shell /bin/sh agent

# 0. the shipped example unit, as its install comment says: doctor in
# ExecStartPre=, then the job; started twice.
useradd --system --no-create-home --shell /usr/sbin/nologin stockade-agent
for n in 1 2; do
	if systemctl start stockade-agent-job.service; then
		i=0 # the journal may take a moment to have the unit's stdout
		while :; do
			j=$(journalctl -u stockade-agent-job -o cat --no-pager)
			runs=$(printf '%s\n' "$j" | grep -c '^{"verdict":"ok"')
			[ "$runs" -ge $n ] || [ $i -ge 10 ] && break
			sleep 1; i=$((i + 1))
		done
		if [ "$runs" = $n ] && printf '%s\n' "$j" | grep -q '^default jail: ok'; then
			ok "shipped stockade-agent-job.service, start $n: doctor ok, then the job's verdict ok"
		else
			bad "shipped stockade-agent-job.service, start $n: $runs ok runs: $(printf '%s\n' "$j" | tail -n 8 | tr '\n' '|')"
		fi
	else
		bad "systemctl start stockade-agent-job.service ($n): $(systemctl status stockade-agent-job --no-pager 2>&1 | tail -n 12 | tr '\n' '|')"
	fi
done

# 1. systemctl start of the example-shaped service, as its dedicated user:
# doctor, then two runs in the same start. systemctl start of a oneshot
# returns once every ExecStart= has exited.
if systemctl start agent-job.service && finished agent-job.service 5 && succeeded agent-job.service &&
	[ "$(field /var/lib/agent/agent-job.json verdict)" = ok ] && [ "$(field /var/lib/agent/agent-job.json cgroup)" = v2 ] &&
	[ "$(field /var/lib/agent/agent-job2.json verdict)" = ok ]; then
	ok "systemctl start agent-job.service: doctor, then two runs, verdict ok, cgroup v2, as user agent"
else
	bad "systemctl start agent-job.service: $(tail -c 600 /var/lib/agent/agent-job.json /var/lib/agent/agent-job2.json 2>&1) | $(journalctl -u agent-job -o cat --no-pager | tail -n 6 | tr '\n' '|')"
fi

# 2. the timer fires the job: read once the job it started has finished.
rm -f /var/lib/agent/agent-job.json /var/lib/agent/agent-job2.json
before=$(systemctl show -p InvocationID --value agent-job.service)
systemctl start agent-job.timer
if ran_anew agent-job.service "$before" 180 && succeeded agent-job.service &&
	[ "$(field /var/lib/agent/agent-job.json verdict)" = ok ] && [ "$(field /var/lib/agent/agent-job2.json verdict)" = ok ]; then
	ok "agent-job.timer fired the job (verdict ok, both runs)"
else
	bad "agent-job.timer: $(systemctl status agent-job.timer agent-job.service --no-pager | tail -6 | tr '\n' '|') $(tail -c 300 /var/lib/agent/agent-job.json 2>&1)"
fi

# 3. a memory limit hit inside a unit.
systemd-run --wait --quiet -p User=agent -p Delegate="memory pids cpu" -p MemoryMax=512M \
	/bin/sh -c 'exec stockade run --memory 64M --json -- python3 -c "bytearray(200 << 20)" > /var/tmp/mem.json'
v=$(field /var/tmp/mem.json verdict)
[ "$v" = memory ] && ok "memory limit inside a unit: verdict memory" || bad "memory limit inside a unit: verdict $v: $(cat /var/tmp/mem.json)"

# 4. two units at once, each with its own jail: their run times overlap.
for u in one two; do
	systemd-run --unit=sd-$u --quiet -p User=agent -p Delegate="memory pids cpu" \
		/bin/sh -c "exec stockade run --json --memory 128M -- python3 -c 'import time; s = time.time(); time.sleep(5); print(\"$u\", s, time.time())' > /var/tmp/$u.json"
done
finished sd-one 90; finished sd-two 90
overlap=$(python3 -c 'import json
a, b = (json.load(open("/var/tmp/%s.json" % u))["stdout"].split() for u in ("one", "two"))
print(a[0] == "one" and b[0] == "two" and float(a[1]) < float(b[2]) and float(b[1]) < float(a[2]))' 2>&1)
if [ "$overlap" = True ]; then
	ok "two units at once: both jails ran, at the same time, each with its own output"
else
	bad "two units: $overlap $(cat /var/tmp/one.json /var/tmp/two.json 2>/dev/null | head -c 400)"
fi

# 5. systemctl stop mid-run leaves nothing.
systemd-run --unit=sd-stop --quiet -p User=agent -p Delegate="memory pids cpu" -p KillMode=mixed \
	stockade run --timeout 10m -- python3 -c 'import time; time.sleep(600)' sleep-marker
i=0; while ! pgrep -f sleep-marker >/dev/null && [ $i -lt 60 ]; do sleep 1; i=$((i + 1)); done
pgrep -f sleep-marker >/dev/null || bad "systemctl stop: the jail never started"
systemctl stop sd-stop
sleep 1
left=$(leftovers)
[ -z "$left" ] && ok "systemctl stop mid-run: no cgroup, process or run directory left" || bad "systemctl stop mid-run left: $left"

# 6. a user service of a non-root user (user@.service delegates).
loginctl enable-linger agent
uid=$(id -u agent)
i=0; while [ ! -S /run/user/$uid/bus ] && [ $i -lt 60 ]; do sleep 1; i=$((i + 1)); done
su -s /bin/sh agent -c "XDG_RUNTIME_DIR=/run/user/$uid DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/$uid/bus \
	systemd-run --user --wait --quiet -p Delegate=yes /bin/sh -c 'exec stockade run --json --memory 64M -- python3 -c \"bytearray(200 << 20)\" > /tmp/user.json'" 
cp /tmp/user.json /var/tmp/user.json 2>/dev/null
v=$(field /var/tmp/user.json verdict)
[ "$v" = memory ] && ok "user service of user agent (user@$uid.service): memory verdict" ||
	bad "user service: verdict $v: $(cat /sys/fs/cgroup/user.slice/user-$uid.slice/user@$uid.service/cgroup.controllers 2>&1) $(cat /var/tmp/user.json 2>&1)"

# 7. without delegation: fail closed, naming the unit setting.
systemd-run --wait --quiet -p User=agent /bin/sh -c 'stockade run -- true 2> /var/tmp/nodeleg.err; echo $? > /var/tmp/nodeleg.code'
if [ "$(cat /var/tmp/nodeleg.code)" = 125 ] && grep -q 'add Delegate=memory pids cpu' /var/tmp/nodeleg.err; then
	ok "without Delegate=: exit 125 naming Delegate=memory pids cpu"
else
	bad "without Delegate=: exit $(cat /var/tmp/nodeleg.code): $(cat /var/tmp/nodeleg.err)"
fi

left=$(leftovers)
[ -z "$left" ] && ok "nothing of stockade's left at the end" || bad "left at the end: $left"
echo "SDTEST DONE passed=$pass failed=$fail"
systemctl poweroff --no-block
