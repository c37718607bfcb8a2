#!/usr/bin/env bash
# The package under a real systemd: builds the .deb, boots a Debian root
# with systemd-nspawn (systemd as the container's PID 1), installs the .deb
# there and drives the units with systemctl, journalctl and the coordrun
# CLI. See packaging/README.md.
#
#   packaging/systemd-test/run.sh [SCENARIO...]   (default: all, in order)
#
# Exit 0: every scenario passed; 1: a scenario or a step failed; 77: this
# machine cannot run the test (not root, or nspawn cannot boot a container),
# with the reason on stderr and, if SYSTEMD_TEST_SKIP_FILE is set, in that
# file.
set -euo pipefail

SUITE=${SYSTEMD_TEST_SUITE:-bookworm}
# What the root holds beyond debootstrap's minbase: systemd as init, dbus
# for systemctl's usual path, curl for /readyz, procps for pgrep.
PACKAGES=systemd,systemd-sysv,dbus,curl,procps
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/coordrun/systemd-root
# Scenario windows: WATCHDOG is the WatchdogSec= of the drop-in of the
# watchdog scenario (the unit ships 30s; shorter so that the window below
# spans many intervals in little time), QUIET the window in which nothing
# may restart.
WATCHDOG=${SYSTEMD_TEST_WATCHDOG:-4}
QUIET=${SYSTEMD_TEST_QUIET:-40}

SCENARIOS=(serve no-hosts unconfigured cron-stop template nightly cron-notify hardening purge reinstall)

repo=$(cd "$(dirname "$0")/../.." && pwd)
t0=$SECONDS

say() { printf '== %s [%ss]\n' "$*" $((SECONDS - t0)); }
fail() {
  printf 'FAIL: %s\n' "$*" >&2
  exit 1
}
skip() {
  printf 'skipped: %s\n' "$*" >&2
  [ -z "${SYSTEMD_TEST_SKIP_FILE:-}" ] || printf '%s\n' "$*" >"$SYSTEMD_TEST_SKIP_FILE"
  exit 77
}

# until DEADLINE_SECONDS WHAT CMD...: run CMD every 0.2s until it succeeds;
# fail naming WHAT when the deadline passes first.
until_ok() {
  local limit=$1 what=$2 end=$((SECONDS + $1))
  shift 2
  until "$@"; do
    [ $SECONDS -lt $end ] || fail "not within ${limit}s: $what"
    sleep 0.2
  done
}

# --- Preconditions ----------------------------------------------------------

[ "$(id -u)" = 0 ] || skip "not root: debootstrap and systemd-nspawn need root"
for s in "$@"; do
  [[ " ${SCENARIOS[*]} " == *" $s "* ]] || fail "unknown scenario $s (have: ${SCENARIOS[*]})"
done
[ $# -eq 0 ] || SCENARIOS=("$@")

if ! command -v debootstrap >/dev/null || ! command -v systemd-nspawn >/dev/null; then
  say "installing debootstrap and systemd-container"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap systemd-container >/dev/null ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap systemd-container >/dev/null; } ||
    fail "cannot install debootstrap and systemd-container"
fi

# apt_mirror prints the first URI apt is configured with for SUITE: deb822
# stanzas (*.sources: Types, URIs, Suites, Enabled) and one-line entries
# (sources.list, *.list: deb [options] URI SUITE COMPONENT...).
apt_mirror() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk -v suite="$1" '
      function flush() {
        if (types ~ /(^| )deb( |$)/ && (" " suites " ") ~ (" " suite " ") && enabled != "no" && uris != "") {
          split(uris, u, " "); print u[1]; found = 1; exit
        }
        types = uris = suites = enabled = ""
      }
      /^[ \t]*#/ { next }
      /^[ \t]*$/ { flush(); next }
      { key = tolower($1); sub(/:$/, "", key); $1 = ""; sub(/^ +/, "")
        if (key == "types") types = $0; else if (key == "uris") uris = $0
        else if (key == "suites") suites = $0; else if (key == "enabled") enabled = tolower($0) }
      END { if (!found) flush() }' "$f"
  done
  { cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true; } |
    sed -E 's/#.*//; s/\[[^]]*\]//' |
    awk -v suite="$1" '$1 == "deb" && $3 == suite { print $2 }'
}
mirror=$(apt_mirror "$SUITE" | head -n 1)
[ -n "$mirror" ] || fail "apt is configured with no source for $SUITE (/etc/apt/sources.list, /etc/apt/sources.list.d)"

work=$(mktemp -d /tmp/coordrun-systemd-test.XXXXXX)
nspawn_pid=
leader=
cleanup() {
  local rc=$?
  if [ -n "$nspawn_pid" ] && kill -0 "$nspawn_pid" 2>/dev/null; then
    if [ $rc -ne 0 ] && [ $rc -ne 77 ] && [ -n "$leader" ]; then
      echo "--- the container's journal of coordrun units (last 40 lines)" >&2
      ct journalctl --no-pager -q -u 'coordrun*' -n 40 >&2 || true
    fi
    # SIGTERM makes nspawn shut the container down in order; KILL after 30s.
    kill -TERM "$nspawn_pid" 2>/dev/null || true
    local end=$((SECONDS + 30))
    while kill -0 "$nspawn_pid" 2>/dev/null && [ $SECONDS -lt $end ]; do sleep 0.2; done
    kill -KILL "$nspawn_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM # through cleanup: the container is shut down

# --- The package --------------------------------------------------------------

say "make package"
make -C "$repo" --no-print-directory package DIST="$work/dist" BIN="$work/coordrun" >"$work/package.log" 2>&1 ||
  { tail -n 30 "$work/package.log" >&2; fail "make package"; }
deb=$(ls "$work"/dist/coordrun_*.deb)

# --- The root, cached per suite and package list ------------------------------

key=$(printf '%s %s\n' "$SUITE" "$PACKAGES" | sha256sum | cut -c1-12)
root=$CACHE/$SUITE-$key
mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9 # one build at a time; a second run waits and then uses it
if [ ! -f "$root/.complete" ]; then
  say "debootstrap $SUITE from $mirror into $root"
  rm -rf "$root.new"
  debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$root.new" "$mirror" >"$work/debootstrap.log" 2>&1 ||
    { tail -n 30 "$work/debootstrap.log" >&2; fail "debootstrap $SUITE $mirror"; }
  # Each boot gets a fresh machine id; no login prompt on the console.
  : >"$root.new/etc/machine-id"
  ln -sf /dev/null "$root.new/etc/systemd/system/console-getty.service"
  touch "$root.new/.complete"
  rm -rf "$root"
  mv "$root.new" "$root"
else
  say "cached root $root"
fi
flock -u 9

# --- Boot ---------------------------------------------------------------------

# --volatile=overlay: the cached root is the lower layer of an overlay whose
# upper layer is a tmpfs, so every run starts from the same root and
# leaves it untouched.
say "booting $SUITE with systemd-nspawn"
mkdir -p "$work/pkg"
cp "$deb" "$work/pkg/"
systemd-nspawn --boot --keep-unit --register=no --private-network \
  --volatile=overlay --console=read-only --machine="coordrun-test-$$" \
  --directory="$root" --bind-ro="$work/pkg:/run/coordrun-pkg" \
  >"$work/console.log" 2>&1 &
nspawn_pid=$!

# The container's PID 1 is the systemd process among nspawn's children.
find_leader() {
  kill -0 "$nspawn_pid" 2>/dev/null || return 0
  leader=$(pgrep -P "$nspawn_pid" -x systemd || true)
  [ -n "$leader" ]
}
end=$((SECONDS + 30))
while ! find_leader || [ -z "$leader" ]; do
  kill -0 "$nspawn_pid" 2>/dev/null ||
    skip "systemd-nspawn cannot boot a container here: $(sed 's/\x1b\[[0-9;]*m//g' "$work/console.log" | tail -n 5 | tr '\n' ' ')"
  [ $SECONDS -lt $end ] || skip "systemd-nspawn started no systemd within 30s"
  sleep 0.2
done

# ct CMD...: run CMD in the container, in all its namespaces, with a clean
# environment.
ct() {
  nsenter --target "$leader" --all -- \
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 SYSTEMD_PAGER= SYSTEMD_COLORS=0 "$@"
}

# A booted plain Debian root is the precondition of every scenario, and
# owes nothing to coordrun: when it does not come up, the machine cannot
# run this test.
# Until PID 1 listens on its private socket, systemctl cannot reach it;
# from then on, --wait returns once booting has finished.
end=$((SECONDS + 120))
while :; do
  state=$(timeout $((end - SECONDS)) nsenter --target "$leader" --all systemctl is-system-running --wait 2>&1) || true
  case $state in
    running) break ;;
    degraded)
      echo "container degraded: $(ct systemctl --failed --plain --no-legend | tr '\n' ' ')"
      break
      ;;
    *"Failed to connect"*) [ $SECONDS -lt $end ] || skip "the container's systemd did not come up within 120s: $state" ;;
    *) skip "the container's systemd did not come up (is-system-running: $state)" ;;
  esac
  sleep 0.2
done
say "container up: $(ct systemctl --version | head -n 1), leader pid $leader"

say "dpkg -i $(basename "$deb")"
ct dpkg -i "/run/coordrun-pkg/$(basename "$deb")" >"$work/dpkg.log" 2>&1 ||
  { cat "$work/dpkg.log" >&2; fail "dpkg -i"; }
ct cp /etc/coordrun/coordrun.yaml /root/coordrun.yaml.shipped

# --- Helpers for the scenarios --------------------------------------------

# prop UNIT PROPERTY: one property of a unit, as systemctl show prints it.
prop() { ct systemctl show --value -p "$2" "$1"; }
# word WORD: a four-letter word's answer on the client port, by bash's /dev/tcp.
word() { ct bash -c 'exec 3<>/dev/tcp/127.0.0.1/2181 && printf %s "$1" >&3 && timeout 5 cat <&3' _ "$1" 2>/dev/null; }
# journal UNIT: the unit's journal lines of this boot's current invocation
# cursor on (see mark).
cursor=
mark() { cursor=$(ct journalctl --show-cursor -n 0 -q | sed -n 's/^-- cursor: //p'); }
journal() { ct journalctl --no-pager -q -o cat --after-cursor="$cursor" -u "$1"; }
# journal_has UNIT REGEX: whether a journal line since the mark matches
# (read whole first: grep -q closing the pipe early would fail pipefail).
journal_has() {
  local lines
  lines=$(journal "$1")
  grep -q -E -e "$2" <<<"$lines"
}
# since NANOSECONDS: the seconds since a date +%s%N, to the millisecond.
since() {
  local ms=$((($(date +%s%N) - $1) / 1000000))
  printf '%d.%03d' $((ms / 1000)) $((ms % 1000))
}
show() { printf '%s\n' "$@" | sed 's/^/   /'; }

member_config() {
  ct tee /etc/coordrun/coordrun.yaml >/dev/null <<'YAML'
id: "1"
data-dir: /var/lib/coordrun
client-addr: ":2181"
peer-addr: 127.0.0.1:2888
peers: 1=127.0.0.1:2888
admin-addr: 127.0.0.1:8080
YAML
}
hosts_file() {
  printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' | ct tee /etc/hosts >/dev/null
}

is_active() { [ "$(prop "$1" ActiveState)" = active ]; }
# ensure_installed: the package is installed (a scenario after purge, or
# run alone after one, starts from it too).
ensure_installed() {
  [ "$(ct dpkg-query -W -f '${Status}' coordrun 2>/dev/null)" = "install ok installed" ] && return 0
  ct dpkg -i "/run/coordrun-pkg/$(basename "$deb")" >"$work/dpkg.log" 2>&1 || { cat "$work/dpkg.log" >&2; fail "dpkg -i"; }
}
# score FILE-OR-UNIT [--offline=yes]: systemd-analyze security's overall
# exposure of a unit.
score() {
  ct systemd-analyze security --no-pager "$@" 2>/dev/null | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p'
}

# --- Scenarios ----------------------------------------------------------------

# serve: a configured single member. systemctl start returns once it
# serves (Type=notify), so ruok, ensemble status and /readyz answer at
# once, without waiting; kill -9 of the main process is a failure that
# Restart=on-failure restarts.
scenario_serve() {
  hosts_file
  member_config
  mark
  local start
  start=$(date +%s%N)
  ct systemctl start coordrun-server || fail "systemctl start coordrun-server: exit $?"
  show "systemctl start returned 0 after $(since "$start")s; $(prop coordrun-server ActiveState)/$(prop coordrun-server SubState), status: $(prop coordrun-server StatusText)"
  local ruok ready status
  ruok=$(word ruok)
  [ "$ruok" = imok ] || fail "ruok right after start answered '$ruok'"
  ready=$(ct curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8080/readyz)
  [ "$ready" = 200 ] || fail "/readyz right after start: HTTP $ready"
  status=$(ct coordrun ensemble status --servers 127.0.0.1:2181 2>&1) || fail "coordrun ensemble status: exit $?: $status"
  show "ruok: $ruok; /readyz: HTTP $ready; ensemble status:" "$status"
  grep -q leader <<<"$status" || fail "ensemble status names no leader"

  local pid restarts
  pid=$(prop coordrun-server MainPID)
  restarts=$(prop coordrun-server NRestarts)
  start=$(date +%s%N)
  ct kill -9 "$pid"
  restarted() {
    local p
    p=$(prop coordrun-server MainPID)
    [ "$p" != 0 ] && [ "$p" != "$pid" ] && [ "$(prop coordrun-server ActiveState)" = active ]
  }
  until_ok 30 "coordrun-server restarted after kill -9 of $pid" restarted
  [ "$(prop coordrun-server NRestarts)" = $((restarts + 1)) ] || fail "NRestarts $(prop coordrun-server NRestarts) after one kill, was $restarts"
  show "kill -9 $pid: active again as pid $(prop coordrun-server MainPID) after $(since "$start")s, NRestarts $(prop coordrun-server NRestarts)"
  journal_has coordrun-server 'status=9/KILL' || fail "the journal does not show the SIGKILL"
  [ "$(word ruok)" = imok ] || fail "ruok after the restart"
}

# no-hosts: the same member in a root without /etc/hosts (localhost does
# not resolve) passes its liveness check: no watchdog restart within QUIET
# seconds of a WatchdogSec of WATCHDOG seconds (a drop-in; the unit ships
# 30s). Then SIGSTOP shows the watchdog is armed: the frozen member is
# aborted and restarted.
scenario_no_hosts() {
  ct rm -f /etc/hosts
  member_config
  ct mkdir -p /run/systemd/system/coordrun-server.service.d
  printf '[Service]\nWatchdogSec=%ss\n' "$WATCHDOG" | ct tee /run/systemd/system/coordrun-server.service.d/watchdog.conf >/dev/null
  ct systemctl daemon-reload
  mark
  ct systemctl restart coordrun-server || fail "systemctl restart coordrun-server: exit $?"
  local pid restarts wd
  pid=$(prop coordrun-server MainPID)
  restarts=$(prop coordrun-server NRestarts)
  wd=$(prop coordrun-server WatchdogUSec)
  ct getent hosts localhost >/dev/null && fail "localhost resolves without /etc/hosts"
  show "no /etc/hosts (getent hosts localhost fails); WatchdogUSec=$wd; pid $pid, NRestarts $restarts"
  local end=$((SECONDS + QUIET))
  while [ $SECONDS -lt $end ]; do
    [ "$(prop coordrun-server MainPID)" = "$pid" ] || fail "coordrun-server restarted without /etc/hosts: $(journal coordrun-server | grep -m 3 -i -e watchdog -e liveness)"
    sleep 1
  done
  local withheld
  withheld=$(journal coordrun-server | grep -c 'liveness check failed' || true)
  [ "$withheld" = 0 ] || fail "$withheld liveness check failures in the journal: $(journal coordrun-server | grep -m 1 'liveness check failed')"
  journal_has coordrun-server 'systemd watchdog enabled' || fail "the member did not see the watchdog"
  show "over ${QUIET}s ($((QUIET / WATCHDOG)) watchdog intervals): pid unchanged, NRestarts $(prop coordrun-server NRestarts), 0 liveness check failures"

  local start
  start=$(date +%s%N)
  ct kill -STOP "$pid"
  aborted() { [ "$(prop coordrun-server NRestarts)" -gt "$restarts" ] && [ "$(prop coordrun-server ActiveState)" = active ]; }
  until_ok $((WATCHDOG * 3 + 10)) "the watchdog restarting the stopped member" aborted
  journal_has coordrun-server 'Watchdog timeout' || fail "restarted, but the journal shows no watchdog timeout"
  show "SIGSTOP $pid: watchdog timeout, active again as pid $(prop coordrun-server MainPID) after $(since "$start")s"
  # The abort's record: one line with the reason, the stacks in a file.
  local abort dump stacks
  abort=$(journal coordrun-server | grep -m 1 'aborting on SIGABRT' || true)
  dump=$(journal coordrun-server | grep -c -E '^goroutine [0-9]+ ' || true)
  stacks=$(ct sh -c 'ls /var/lib/coordrun/abort-*.stacks 2>/dev/null' | tail -n 1)
  show "the abort in the journal: $abort" "goroutine headers in the journal: $dump; stacks saved: ${stacks:-none} ($(ct grep -c '^goroutine ' "${stacks:-/dev/null}" 2>/dev/null || echo 0) goroutines)"
  [ -n "$abort" ] || fail "no abort line in the journal"
  [ "$dump" = 0 ] || fail "$dump goroutine headers in the journal"
  [ -n "$stacks" ] || fail "no abort-*.stacks file in /var/lib/coordrun"
  journal_has coordrun-server 'status=134' || fail "the aborted member did not exit 134"
  ct rm -r /run/systemd/system/coordrun-server.service.d
  ct systemctl daemon-reload
}

# unconfigured: enable --now with the config as shipped (no id) fails the
# start once and stays failed (exit 64 is not restarted), with a message
# in terms of the config file's key.
scenario_unconfigured() {
  ct systemctl stop coordrun-server
  ct systemctl reset-failed coordrun-server 2>/dev/null || true
  ct cp /root/coordrun.yaml.shipped /etc/coordrun/coordrun.yaml
  mark
  local rc=0
  ct systemctl enable --now coordrun-server >/dev/null 2>&1 || rc=$?
  [ $rc -ne 0 ] || fail "systemctl enable --now succeeded with an unconfigured member"
  show "systemctl enable --now: exit $rc"
  # Restarts would come RestartSec (2s) apart; three of them is long enough.
  local end=$((SECONDS + 7))
  while [ $SECONDS -lt $end ] && [ "$(prop coordrun-server NRestarts)" = 0 ]; do
    sleep 1
  done
  local st n code
  st=$(prop coordrun-server ActiveState)
  n=$(prop coordrun-server NRestarts)
  code=$(prop coordrun-server ExecMainStatus)
  show "after 7s: $st, NRestarts $n, exit status $code"
  show "journal:" "$(journal coordrun-server | grep -v '^$' | head -n 8)"
  [ "$st" = failed ] || fail "unconfigured coordrun-server is $st, want failed"
  [ "$n" = 0 ] || fail "unconfigured coordrun-server was restarted $n times"
  [ "$code" = 64 ] || fail "unconfigured coordrun-server exited $code, want 64"
  journal_has coordrun-server 'config key id\b' || fail "the journal does not name the config key id"
}

# cron-stop: a coordrun-cron@ instance stopped right after its start,
# with its member gone meanwhile (as dpkg's removal does, or a shutdown),
# stops at once and ends inactive, not failed. Each round starts the
# member, starts the instance (Type=notify: until its jobs are
# registered), stops the member, then the instance.
# With a firing claimed, its records get as long as the session may live
# (the lease, up to a session timeout of 10s ahead, plus 10s); a drop-in
# shortens TimeoutStopSec (2min shipped) to 40s, so that a hang fails
# sooner.
scenario_cron_stop() {
  member_config
  hosts_file
  ct tee /etc/coordrun/cron/demo.yaml >/dev/null <<'YAML'
jobs:
  - name: tick
    schedule: "@every 5s"
    command: /bin/true
YAML
  ct mkdir -p /run/systemd/system/coordrun-cron@.service.d
  printf '[Service]\nTimeoutStopSec=40s\n' | ct tee /run/systemd/system/coordrun-cron@.service.d/stop.conf >/dev/null
  ct systemctl daemon-reload
  ct systemctl reset-failed
  local i t result took early=0 rounds=${SYSTEMD_TEST_CRON_ROUNDS:-10} slowest=0.000
  for ((i = 1; i <= rounds; i++)); do
    # reset-failed also resets the start rate limit (5 in 10s), which
    # these rounds would reach.
    ct systemctl reset-failed coordrun-server coordrun-cron@demo 2>/dev/null || true
    ct systemctl start coordrun-server || fail "round $i: systemctl start coordrun-server"
    mark
    ct systemctl start coordrun-cron@demo || fail "round $i: systemctl start coordrun-cron@demo"
    ct systemctl stop coordrun-server
    t=$(date +%s%N)
    ct systemctl stop coordrun-cron@demo
    took=$(since "$t")
    result=$(prop coordrun-cron@demo Result)
    journal_has coordrun-cron@demo 'stopping before the first firing' && early=$((early + 1))
    [ "$result" = success ] || fail "round $i: coordrun-cron@demo stopped with result $result after ${took}s, exit status $(prop coordrun-cron@demo ExecMainStatus)"
    [ "${took%.*}" -lt 25 ] || fail "round $i: stopping coordrun-cron@demo took ${took}s"
    ((10#${took/./} <= 10#${slowest/./})) || slowest=$took
  done
  show "$rounds rounds: every stop ended success, the slowest after ${slowest}s; $early of them before the first firing"

  # And stopped while a job runs, its member gone: the job gets the
  # signal, and its firing's record is written while the session may live.
  ct tee /etc/coordrun/cron/long.yaml >/dev/null <<'YAML'
jobs:
  - name: long
    schedule: "@every 2s"
    command: ["/bin/sleep", "60"]
YAML
  ct systemctl start coordrun-server || fail "systemctl start coordrun-server"
  mark
  ct systemctl start coordrun-cron@long || fail "systemctl start coordrun-cron@long"
  until_ok 10 "a firing of coordrun-cron@long running" journal_has coordrun-cron@long 'msg=running'
  ct systemctl stop coordrun-server
  t=$(date +%s%N)
  ct systemctl stop coordrun-cron@long
  took=$(since "$t")
  result=$(prop coordrun-cron@long Result)
  show "stopped during a run with the member gone: result $result after ${took}s"
  [ "$result" = success ] || fail "coordrun-cron@long stopped during a run with result $result after ${took}s"
  [ "${took%.*}" -lt 25 ] || fail "stopping coordrun-cron@long took ${took}s"
  ct rm -r /run/systemd/system/coordrun-cron@.service.d
  ct systemctl daemon-reload
}

# purge: with the member and a cron instance enabled and running, dpkg
# --purge leaves no coordrun process, unit link, binary or /etc/coordrun.
scenario_purge() {
  member_config
  hosts_file
  ct systemctl reset-failed coordrun-server 2>/dev/null || true
  ct systemctl enable --now coordrun-server >/dev/null 2>&1 || fail "systemctl enable --now coordrun-server"
  ct tee /etc/coordrun/cron/demo.yaml >/dev/null <<'YAML'
jobs:
  - name: tick
    schedule: "@every 5s"
    command: /bin/true
YAML
  ct systemctl enable --now coordrun-cron@demo >/dev/null 2>&1 || fail "systemctl enable --now coordrun-cron@demo"
  show "before: $(ct pgrep -c -x coordrun) coordrun processes; links: $(ct find /etc/systemd/system -name 'coordrun*' | tr '\n' ' ')"
  local out rc=0
  out=$(ct dpkg --purge coordrun 2>&1) || rc=$?
  show "dpkg --purge: exit $rc" "$out"
  [ $rc = 0 ] || fail "dpkg --purge: exit $rc"
  local procs links left units
  procs=$(ct pgrep -a -x coordrun || true)
  links=$(ct find /etc/systemd /run/systemd/system -name 'coordrun*' 2>/dev/null || true)
  left=$(ct sh -c 'ls -d /usr/bin/coordrun /etc/coordrun /usr/lib/systemd/system/coordrun* 2>/dev/null' || true)
  units=$(ct systemctl list-units --all --plain --no-legend 'coordrun*')
  show "after: processes: ${procs:-none}; unit links: ${links:-none}; files: ${left:-none}; units systemd knows: ${units:-none}"
  [ -z "$procs" ] || fail "coordrun processes left after purge: $procs"
  [ -z "$links" ] || fail "unit links left after purge: $links"
  [ -z "$left" ] || fail "files left after purge: $left"
  [ -z "$units" ] || fail "systemd still knows coordrun units after purge: $units"
  grep -q 'not removed' <<<"$out" && fail "dpkg --purge left something: $(grep 'not removed' <<<"$out")"
  return 0
}

# template: three members from coordrun-server@.service in one container,
# each with its /etc/coordrun/mN.yaml (own ports) and /var/lib/coordrun/mN.
# ensemble status --wait reports them healthy; stopping the leader's
# instance hands leadership over: writes through another member resume
# (timed from the stop to the first write that succeeds) and no member
# names the stopped one leader; started again, it rejoins.
scenario_template() {
  ensure_installed
  hosts_file
  ct systemctl stop coordrun-server 2>/dev/null || true
  local i peers="1=127.0.0.1:2981,2=127.0.0.1:2982,3=127.0.0.1:2983" servers="127.0.0.1:2281,127.0.0.1:2282,127.0.0.1:2283"
  # The members authenticate each other with a shared secret, as the
  # packaged config shows.
  ct sh -c 'umask 077; coordrun ensemble secret > /etc/coordrun/peer-secret && chown coordrun: /etc/coordrun/peer-secret' ||
    fail "coordrun ensemble secret"
  for i in 1 2 3; do
    printf 'id: "%s"\ndata-dir: /var/lib/coordrun/m%s\nclient-addr: 127.0.0.1:228%s\npeer-addr: 127.0.0.1:298%s\npeers: %s\npeer-secret-file: /etc/coordrun/peer-secret\n' \
      "$i" "$i" "$i" "$i" "$peers" | ct tee "/etc/coordrun/m$i.yaml" >/dev/null
  done
  mark
  local start st
  start=$(date +%s%N)
  # --no-block: each instance is active only once a quorum is up.
  ct systemctl start --no-block coordrun-server@m1 coordrun-server@m2 coordrun-server@m3
  st=$(ct coordrun ensemble status --servers "$servers" --wait 60s 2>&1) || fail "ensemble status --wait: exit $?: $st"
  show "coordrun-server@m1..m3 healthy after $(since "$start")s:" "$st"
  for i in 1 2 3; do
    until_ok 10 "coordrun-server@m$i active" is_active "coordrun-server@m$i"
    ct test -f "/var/lib/coordrun/m$i/raft.db" || fail "no raft log in /var/lib/coordrun/m$i"
  done
  local json lead
  json=$(ct coordrun ensemble status --json --servers "$servers")
  lead=$(awk -F'"' '/"leader":/ { print $4; exit }' <<<"$json")
  [ -n "$lead" ] || fail "no leader in $json"
  local others=() o
  for i in 1 2 3; do [ "$i" = "$lead" ] || others+=("$i"); done
  o=${others[0]}

  # A write is a session (createSession goes through raft) and a lock
  # node; coordrun run does both and deletes the node.
  write_through() { ct coordrun run --servers "127.0.0.1:228$1" --name template-probe -- true >/dev/null 2>&1; }
  write_through "$o" || fail "a write through member $o before the stop"
  mark
  local t stopped resumed
  t=$(date +%s%N)
  ct systemctl stop "coordrun-server@m$lead"
  stopped=$(since "$t")
  until_ok 30 "a write through member $o after stopping the leader" write_through "$o"
  resumed=$(since "$t")
  local views
  views=$(ct coordrun ensemble status --json --servers "127.0.0.1:228${others[0]},127.0.0.1:228${others[1]}" | grep -o '"\(id\|leader\)": *"[^"]*"' | tr -d ' "' | paste -sd ' ')
  show "systemctl stop coordrun-server@m$lead (the leader) took ${stopped}s; first write through member $o ${resumed}s after the stop" \
    "journal of m$lead: $(journal "coordrun-server@m$lead" | grep -m 1 'leadership handed over' || true)" \
    "what the others say (id, leader): $views"
  journal_has "coordrun-server@m$lead" 'leadership handed over before stopping.* to=[0-9]' || fail "the stopped leader did not hand over"
  for i in "${others[@]}"; do
    json=$(ct coordrun ensemble status --json --servers "127.0.0.1:228$i") || fail "ensemble status of member $i"
    grep -o '"leader": *"[^"]*"' <<<"$json" | grep -q "\"$lead\"" && fail "member $i still names the stopped member $lead leader: $json"
    grep -q '"leader": *"[1-3]"' <<<"$json" || fail "member $i names no leader: $json"
  done

  t=$(date +%s%N)
  ct systemctl start "coordrun-server@m$lead" || fail "systemctl start coordrun-server@m$lead again"
  st=$(ct coordrun ensemble status --servers "$servers" --wait 60s 2>&1) || fail "ensemble status --wait after the restart: $st"
  show "started again: active after $(since "$t")s, the three healthy:" "$st"
  ct systemctl stop coordrun-server@m1 coordrun-server@m2 coordrun-server@m3
  ct rm -f /etc/coordrun/m1.yaml /etc/coordrun/m2.yaml /etc/coordrun/m3.yaml /etc/coordrun/peer-secret
}

# nightly: the shipped nightly.service and nightly.timer example, as two
# units standing for two hosts (nightly-a, nightly-b) whose timers fire
# together every 5s, on one lock: the job's runs never overlap (start and
# end times from the journal) and each run's fencing token, in the
# journal, rises. Then a stop during a run ends as the example says: the
# job gets SIGTERM, coordrun exits 143, and with the example's
# SuccessExitStatus=143 the unit ends inactive, without it failed.
scenario_nightly() {
  ensure_installed
  hosts_file
  member_config
  ct systemctl reset-failed coordrun-server 2>/dev/null || true
  ct systemctl start coordrun-server || fail "systemctl start coordrun-server"
  local ex=/usr/share/doc/coordrun/examples u
  ct test -f "$ex/nightly.service" || fail "$ex/nightly.service is not installed"
  ct tee /usr/local/bin/nightly.sh >/dev/null <<'SH'
#!/bin/sh
# The job: its start and end with the run's fencing token.
echo "nightly-run start $(date +%s.%N) token=$COORDRUN_FENCING_TOKEN unit=$NIGHTLY_UNIT"
touch "/run/nightly-running-$NIGHTLY_UNIT"
sleep "$(cat /run/nightly-seconds 2>/dev/null || echo 1.5)"
echo "nightly-run end $(date +%s.%N) token=$COORDRUN_FENCING_TOKEN unit=$NIGHTLY_UNIT"
SH
  ct chmod 0755 /usr/local/bin/nightly.sh
  ct rm -f /run/nightly-seconds
  for u in a b; do
    ct cp "$ex/nightly.service" "/etc/systemd/system/nightly-$u.service"
    ct cp "$ex/nightly.timer" "/etc/systemd/system/nightly-$u.timer"
    ct mkdir -p "/etc/systemd/system/nightly-$u.service.d" "/etc/systemd/system/nightly-$u.timer.d"
    printf '[Service]\nEnvironment=NIGHTLY_UNIT=%s\n' "$u" | ct tee "/etc/systemd/system/nightly-$u.service.d/unit.conf" >/dev/null
    printf '[Timer]\nOnCalendar=\nOnCalendar=*:*:0/5\nAccuracySec=1ms\nPersistent=false\n' | ct tee "/etc/systemd/system/nightly-$u.timer.d/often.conf" >/dev/null
  done
  ct systemctl daemon-reload
  mark
  ct systemctl start nightly-a.timer nightly-b.timer
  runs() { journal nightly-a; journal nightly-b; }
  ended() { [ "$(runs | grep -c '^nightly-run end')" -ge 4 ]; }
  until_ok 40 "four runs of the nightly job" ended
  ct systemctl stop nightly-a.timer nightly-b.timer
  idle() { [ "$(prop nightly-a ActiveState)" != activating ] && [ "$(prop nightly-b ActiveState)" != activating ]; }
  until_ok 20 "the runs in progress ending" idle
  # One row per run: start end token unit, by start.
  local table
  table=$(runs | awk '/^nightly-run (start|end)/ {
      split($4, tk, "="); split($5, un, "=")
      if ($2 == "start") s[tk[2]] = $3; else e[tk[2]] = $3; unit[tk[2]] = un[2] }
    END { for (t in s) print s[t], (t in e ? e[t] : "-"), t, unit[t] }' | sort -n)
  show "runs (start end token unit):" "$table"
  awk 'NR > 1 && $1 < prevend { bad = 1; print "overlap: " prev " / " $0 > "/dev/stderr" }
       NR > 1 && $3 <= prevtok { bad = 1; print "token not rising: " prev " / " $0 > "/dev/stderr" }
       $2 == "-" { bad = 1; print "run without an end: " $0 > "/dev/stderr" }
       { prevend = $2; prevtok = $3; prev = $0 } END { exit bad }' <<<"$table" || fail "the nightly runs overlapped or their tokens did not rise"
  [ "$(awk '{ print $4 }' <<<"$table" | sort -u | wc -l)" = 2 ] || fail "not both units ran the job"
  journal_has nightly-a 'lock acquired; starting job.*token=[0-9]+' || fail "coordrun's line with the token is not in the journal"

  # A stop during a run, with the example's SuccessExitStatus=143 ...
  stop_during_run() {
    ct systemctl reset-failed nightly-a 2>/dev/null || true
    ct rm -f /run/nightly-running-a
    mark
    ct systemctl start --no-block nightly-a.service
    until_ok 15 "a run of nightly-a" ct test -e /run/nightly-running-a
    local t
    t=$(date +%s%N)
    # A stop that succeeds leaves no exit status in the unit's properties
    # (ExecMainStatus is reset) and systemd logs it at debug level only.
    ct systemd-analyze log-level debug
    ct systemctl stop nightly-a.service
    ct systemd-analyze log-level info
    local status
    status=$(journal nightly-a | sed -n 's/.*Main process exited, code=exited, status=\([0-9]*\).*/\1/p' | tail -n 1)
    printf '%s %s %s %s' "$(prop nightly-a ActiveState)" "$(prop nightly-a Result)" "${status:-?}" "$(since "$t")"
  }
  echo 60 | ct tee /run/nightly-seconds >/dev/null
  local r
  r=$(stop_during_run)
  show "systemctl stop during a run, SuccessExitStatus=143 (as shipped): state result exit took = $r"
  [ "$r" != "${r#inactive success 143 }" ] || fail "stop during a run with SuccessExitStatus=143: $r, want inactive success 143"
  # ... and without it (an empty SuccessExitStatus= resets the list).
  printf '[Service]\nSuccessExitStatus=\n' | ct tee /etc/systemd/system/nightly-a.service.d/strict.conf >/dev/null
  ct systemctl daemon-reload
  r=$(stop_during_run)
  show "the same without SuccessExitStatus=143: state result exit took = $r"
  [ "$r" != "${r#failed exit-code 143 }" ] || fail "stop during a run without SuccessExitStatus: $r, want failed exit-code 143"
  ct rm -f /run/nightly-seconds
  for u in a b; do
    ct rm -rf "/etc/systemd/system/nightly-$u.service" "/etc/systemd/system/nightly-$u.timer" \
      "/etc/systemd/system/nightly-$u.service.d" "/etc/systemd/system/nightly-$u.timer.d"
  done
  ct systemctl daemon-reload
  ct systemctl reset-failed nightly-a nightly-b 2>/dev/null || true
}

# cron-notify: coordrun-cron@ is Type=notify: systemctl start returns once
# the jobs are scheduled, and an @every 5s job fires in the journal. A bad
# jobs file fails the start with its line and reason, a missing one with
# its name, both exit 64 and not restarted; an ensemble that does not
# answer (exit 69) is retried.
scenario_cron_notify() {
  ensure_installed
  hosts_file
  member_config
  ct systemctl reset-failed 2>/dev/null || true
  ct systemctl start coordrun-server || fail "systemctl start coordrun-server"
  ct tee /etc/coordrun/cron/tick.yaml >/dev/null <<'YAML'
jobs:
  - name: tick
    schedule: "@every 5s"
    command: echo "tick $COORDRUN_SCHEDULED_TIME token $COORDRUN_FENCING_TOKEN"
YAML
  ct tee /etc/coordrun/cron/bad.yaml >/dev/null <<'YAML'
jobs:
  - name: fine
    schedule: "@every 5s"
    command: /bin/true
  - name: broken
    schedule: "61 * * * *"
    command: /bin/true
YAML
  ct tee /etc/coordrun/cron/unreach.yaml >/dev/null <<'YAML'
jobs:
  - name: unreach
    schedule: "@every 1h"
    command: /bin/true
YAML
  ct rm -f /etc/coordrun/cron/absent.yaml
  ct mkdir -p /run/systemd/system/coordrun-cron@unreach.service.d
  printf '[Service]\nEnvironment=COORDRUN_SERVERS=127.0.0.1:1\n' | ct tee /run/systemd/system/coordrun-cron@unreach.service.d/servers.conf >/dev/null
  ct systemctl daemon-reload
  mark
  ct systemctl start --no-block coordrun-cron@unreach
  local t
  t=$(date +%s%N)
  ct systemctl start coordrun-cron@tick || fail "systemctl start coordrun-cron@tick"
  show "systemctl start coordrun-cron@tick returned after $(since "$t")s: $(prop coordrun-cron@tick ActiveState), status: $(prop coordrun-cron@tick StatusText)"
  [ "$(prop coordrun-cron@tick ActiveState)" = active ] || fail "coordrun-cron@tick not active after its start"
  local rc name
  for name in bad absent; do
    rc=0
    ct systemctl start "coordrun-cron@$name" >/dev/null 2>&1 || rc=$?
    [ $rc -ne 0 ] || fail "systemctl start coordrun-cron@$name succeeded"
    show "systemctl start coordrun-cron@$name: exit $rc; journal: $(journal "coordrun-cron@$name" | grep -m 1 '^coordrun:')"
  done
  # cron prefixes each line of a job's output with the job's name.
  ticks() { [ "$(journal coordrun-cron@tick | grep -c '^tick: tick ')" -ge 2 ]; }
  until_ok 20 "two firings of coordrun-cron@tick" ticks
  show "coordrun-cron@tick fired:" "$(journal coordrun-cron@tick | grep '^tick: tick ')"
  # Restarts would come RestartSec (10s) after the failures.
  retried() { [ "$(prop coordrun-cron@unreach NRestarts)" -ge 1 ]; }
  until_ok 40 "coordrun-cron@unreach (no member answering) restarted" retried
  for name in bad absent; do
    show "coordrun-cron@$name: $(prop "coordrun-cron@$name" ActiveState), exit $(prop "coordrun-cron@$name" ExecMainStatus), NRestarts $(prop "coordrun-cron@$name" NRestarts)"
    [ "$(prop "coordrun-cron@$name" ActiveState)" = failed ] || fail "coordrun-cron@$name is $(prop "coordrun-cron@$name" ActiveState)"
    [ "$(prop "coordrun-cron@$name" NRestarts)" = 0 ] || fail "coordrun-cron@$name was restarted"
    [ "$(prop "coordrun-cron@$name" ExecMainStatus)" = 64 ] || fail "coordrun-cron@$name exited $(prop "coordrun-cron@$name" ExecMainStatus), want 64"
    journal_has "coordrun-cron@$name" 'Assertion failed' && fail "coordrun-cron@$name: Assertion failed"
  done
  journal_has coordrun-cron@bad '/etc/coordrun/cron/bad.yaml:5: job broken: schedule "61 \* \* \* \*".*above maximum' || fail "the journal does not name bad.yaml's line 5 and the reason"
  journal_has coordrun-cron@absent 'cannot read jobs file /etc/coordrun/cron/absent.yaml: no such file or directory' || fail "the journal does not say absent.yaml is missing"
  show "coordrun-cron@unreach: $(journal coordrun-cron@unreach | grep -m 1 -o 'Main process exited.*' || true), NRestarts $(prop coordrun-cron@unreach NRestarts) (retried); $(journal coordrun-cron@unreach | grep -m 1 '^coordrun:' || true)"
  journal_has coordrun-cron@unreach 'status=69' || fail "coordrun-cron@unreach did not exit 69"
  ct systemctl stop coordrun-cron@tick coordrun-cron@unreach
  ct systemctl reset-failed 'coordrun-cron@*' 2>/dev/null || true
  ct rm -rf /run/systemd/system/coordrun-cron@unreach.service.d
  ct rm -f /etc/coordrun/cron/tick.yaml /etc/coordrun/cron/bad.yaml /etc/coordrun/cron/unreach.yaml
  ct systemctl daemon-reload
}

# hardening: systemd-analyze security's exposure of coordrun-server as
# shipped, and of the unit before its last tightening (UMask=0027, no
# ~@resources: rebuilt from the shipped file); the member works under the
# shipped one: it starts and serves, saves a snapshot, keeps its files
# to itself, and pings a 4s watchdog without a restart for 12s.
scenario_hardening() {
  ensure_installed
  hosts_file
  member_config
  local unit=/usr/lib/systemd/system/coordrun-server.service after before
  ct mkdir -p /root/before
  ct sh -c "sed -e 's/^UMask=0077/UMask=0027/' -e 's/^SystemCallFilter=~@privileged @resources\$/SystemCallFilter=~@privileged/' $unit >/root/before/coordrun-server.service"
  ct cmp -s $unit /root/before/coordrun-server.service && fail "the rebuilt unit before the tightening is the shipped one"
  # Both from the files (--offline), alike; the loaded unit's for the record.
  after=$(score --offline=yes $unit)
  before=$(score --offline=yes /root/before/coordrun-server.service)
  show "systemd-analyze security coordrun-server: $after as shipped ($(score coordrun-server) as loaded); $before before (UMask=0027, no ~@resources)"
  [ -n "$after" ] && [ -n "$before" ] || fail "no exposure score"
  awk -v a="$after" -v b="$before" 'BEGIN { exit !(a < b) }' || fail "exposure $after is not below $before"
  show "cron@: $(score coordrun-cron@hardening) (by design: jobs run as root)"

  ct mkdir -p /run/systemd/system/coordrun-server.service.d
  printf '[Service]\nWatchdogSec=4s\n' | ct tee /run/systemd/system/coordrun-server.service.d/watchdog.conf >/dev/null
  ct systemctl daemon-reload
  ct systemctl reset-failed coordrun-server 2>/dev/null || true
  mark
  ct systemctl restart coordrun-server || fail "systemctl restart coordrun-server"
  local pid
  pid=$(prop coordrun-server MainPID)
  [ "$(word ruok)" = imok ] || fail "ruok under the shipped hardening"
  ct coordrun run --name hardening -- true >/dev/null 2>&1 || fail "a write under the shipped hardening"
  ct coordrun ensemble snapshot save /root/hardening.snap --admin-socket /run/coordrun/admin.sock >/dev/null || fail "ensemble snapshot save on the admin socket"
  ct setpriv --reuid 65534 --regid 65534 --clear-groups coordrun ensemble snapshot save /tmp/nobody.snap --servers 127.0.0.1:2181 >/dev/null 2>&1 &&
    fail "uid 65534 saved a snapshot"
  [ "$(ct stat -c '%a %U' /run/coordrun/admin.sock)" = "600 coordrun" ] || fail "admin socket: $(ct stat -c '%a %U' /run/coordrun/admin.sock)"
  ct test -s /root/hardening.snap || fail "the snapshot is empty"
  local modes
  modes=$(ct sh -c 'stat -c "%a %n" /var/lib/coordrun/raft.db /var/lib/coordrun/snapshots 2>/dev/null')
  show "ruok imok; a write; snapshot save on the admin socket $(ct stat -c %s /root/hardening.snap) bytes, refused to uid 65534; data dir: $(tr '\n' ' ' <<<"$modes")"
  awk '{ n = length($1); if (substr($1, n - 1, 2) != "00") bad = 1 } END { exit !bad }' <<<"$modes" &&
    fail "data dir files open to group or others: $modes"
  local end=$((SECONDS + 12))
  while [ $SECONDS -lt $end ]; do
    [ "$(prop coordrun-server MainPID)" = "$pid" ] || fail "coordrun-server restarted under the shipped hardening: $(journal coordrun-server | grep -m 3 -i -e watchdog -e liveness -e 'status=')"
    sleep 1
  done
  journal_has coordrun-server 'systemd watchdog enabled' || fail "the member did not see the watchdog"
  # The one warning asked for: uid 65534's refused snapshot above.
  local warnings
  warnings=$(journal coordrun-server | grep -E 'level=(ERROR|WARN)' | grep -v 'snapshot refused: the client is not the super user' || true)
  [ -z "$warnings" ] || fail "warnings under the shipped hardening: $(head -3 <<<"$warnings")"
  show "12s with WatchdogSec=4s: same pid, no warnings"
  ct rm -r /run/systemd/system/coordrun-server.service.d
  ct systemctl daemon-reload
}

# reinstall: remove (not purge) and install again keep /var/lib/coordrun,
# and the member serves its data from before (a cron job registered
# before, a persistent znode, is listed); so does a purge (which keeps the
# data dir, not the config) and an install with the config written anew.
scenario_reinstall() {
  ensure_installed
  hosts_file
  member_config
  ct systemctl reset-failed coordrun-server 2>/dev/null || true
  ct systemctl start coordrun-server || fail "systemctl start coordrun-server"
  ct tee /etc/coordrun/cron/keep.yaml >/dev/null <<'YAML'
jobs:
  - name: reinstall-marker
    schedule: "@every 1h"
    command: /bin/true
YAML
  ct systemctl start coordrun-cron@keep || fail "systemctl start coordrun-cron@keep"
  ct systemctl stop coordrun-cron@keep
  marker() { ct coordrun cron list --servers 127.0.0.1:2181 2>/dev/null | grep -q reinstall-marker; }
  marker || fail "reinstall-marker is not registered"
  # last_zxid of the (single) member's status.
  last_zxid() {
    local json
    json=$(ct coordrun ensemble status --json)
    awk -F'[:,]' '/"last_zxid":/ { gsub(/ /, "", $2); print $2; exit }' <<<"$json"
  }
  local zxid
  zxid=$(last_zxid)
  local how
  for how in remove purge; do
    ct dpkg "--$how" coordrun >/dev/null 2>&1 || fail "dpkg --$how"
    ct test -f /var/lib/coordrun/raft.db || fail "dpkg --$how removed /var/lib/coordrun/raft.db"
    ensure_installed
    # A purge took the config with /etc/coordrun.
    [ $how = remove ] || member_config
    ct systemctl start coordrun-server || fail "systemctl start coordrun-server after dpkg --$how and -i"
    marker || fail "after dpkg --$how and -i, the member does not serve reinstall-marker"
    local now
    now=$(last_zxid)
    [ "${now:-0}" -ge "${zxid:-0}" ] || fail "last zxid $now after dpkg --$how, was $zxid"
    show "dpkg --$how, dpkg -i, systemctl start: serving, reinstall-marker listed, last zxid $now (was $zxid before)"
  done
  ct systemctl stop coordrun-server
}

for s in "${SCENARIOS[@]}"; do
  say "scenario $s"
  "scenario_${s//-/_}"
  say "scenario $s: ok"
done
say "all passed: ${SCENARIOS[*]}"
