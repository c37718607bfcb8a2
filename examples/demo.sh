#!/usr/bin/env bash
# make demo: a throwaway 3-member coordrun ensemble on loopback, three
# supervisors of examples/nightly.sh contending for one lock, the holder
# killed, the takeover with a higher fencing token, then everything torn
# down. Needs only the built binary and Go.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(pwd)/${BIN:-bin/coordrun}
DIR=$(mktemp -d -t coordrun-demo-XXXX)
# Ports BASE+1..3 (clients) and BASE+10..12 (peers): DEMO_PORT_BASE, or
# the first base from 21810 up (in steps of 100) with none of them taken.
taken() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_base() {
  local b p
  for b in $(seq 21810 100 31810); do
    for p in 1 2 3 10 11 12; do taken $((b+p)) && continue 2; done
    echo "$b"; return
  done
  echo "no free port range from 21810 to 31822; set DEMO_PORT_BASE" >&2; exit 1
}
BASE=${DEMO_PORT_BASE:-$(free_base)}
PEERS="1=127.0.0.1:$((BASE+10)),2=127.0.0.1:$((BASE+11)),3=127.0.0.1:$((BASE+12))"
SERVERS="127.0.0.1:$((BASE+1)),127.0.0.1:$((BASE+2)),127.0.0.1:$((BASE+3))"
export PATH="$(dirname "$BIN"):$PATH" STORE="$DIR/store"
mkdir -p "$STORE"
declare -A MEMBER SUP

cleanup() {
  status=$?
  if [ "$status" -ne 0 ]; then
    echo "== demo failed; member logs:"; tail -n 20 "$DIR"/m*.log 2>/dev/null || true
  fi
  for p in "${SUP[@]}" "${MEMBER[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$DIR"
  echo "== cleaned up $DIR"
}
trap cleanup EXIT

say() { printf '\n== %s %s\n' "$(date +%T.%3N)" "$*"; }

start_member() {
  local i=$1
  "$BIN" server --id "$i" --data-dir "$DIR/m$i" \
    --client-addr "127.0.0.1:$((BASE+i))" --peer-addr "127.0.0.1:$((BASE+9+i))" \
    --peers "$PEERS" --peer-secret-file "$DIR/peer-secret" --log-level warn 2>>"$DIR/m$i.log" &
  MEMBER[$i]=$!
}

say "starting a 3-member ensemble in $DIR, its members sharing a new secret"
(umask 077; "$BIN" ensemble secret > "$DIR/peer-secret")
for i in 1 2 3; do start_member "$i"; done
"$BIN" ensemble status --servers "$SERVERS" --wait 30s

say "a stock ZooKeeper client (go-zookeeper) uses it unchanged"
go run ./examples/zkdemo -servers "$SERVERS" write

say "three hosts run the same job: coordrun run --name nightly -- examples/nightly.sh"
for h in A B C; do
  NIGHTLY_TAG=$h NIGHTLY_SECONDS=4 "$BIN" run -q --servers "$SERVERS" --name nightly \
    --session-timeout 4s --kill-grace 1s -- examples/nightly.sh &
  SUP[$h]=$!
done
holder=""
for _ in $(seq 100); do
  # exit 66 (no such lock) until the first supervisor has made it
  holder=$("$BIN" status --servers "$SERVERS" --json nightly 2>/dev/null | sed -n 's/.*"pid": \([0-9]*\).*/\1/p' | head -1 || true)
  [ -n "$holder" ] && break
  sleep 0.1
done
"$BIN" status --servers "$SERVERS" nightly
sleep 1.5

say "kill -9 the holding supervisor (pid $holder): its job dies with it; another host takes over once the session expires (4s after it was last heard from)"
t0=$(date +%s%N)
kill -9 "$holder"
for h in "${!SUP[@]}"; do [ "${SUP[$h]}" = "$holder" ] && unset "SUP[$h]"; done
wait "$holder" 2>/dev/null || true
for _ in $(seq 100); do
  next=$("$BIN" status --servers "$SERVERS" --json nightly | sed -n 's/.*"pid": \([0-9]*\).*/\1/p' | head -1)
  [ -n "$next" ] && [ "$next" != "$holder" ] && break
  sleep 0.1
done
echo "took over $(( ($(date +%s%N) - t0) / 1000000 )) ms after the kill"
"$BIN" status --servers "$SERVERS" nightly

say "the others finish one after the other, each with a higher token"
for p in "${SUP[@]}"; do wait "$p"; done
SUP=()

say "the fenced store accepted each run's write in token order"
cat "$STORE/data.log"
"$BIN" fence show --state "$STORE/.fence"

say "kill -9 the ensemble's leader: the ensemble elects another and goes on"
leader=$("$BIN" ensemble status --json --servers "$SERVERS" | sed -n 's/^  "leader": "\(.*\)",/\1/p')
kill -9 "${MEMBER[$leader]}"; wait "${MEMBER[$leader]}" 2>/dev/null || true; unset "MEMBER[$leader]"
NIGHTLY_TAG=D NIGHTLY_SECONDS=1 "$BIN" run -q --servers "$SERVERS" --name nightly -- examples/nightly.sh
"$BIN" ensemble status --servers "$SERVERS"
