#!/usr/bin/env bash
# A throwaway 3-member coordrun ensemble on loopback: start it, use it with
# a stock ZooKeeper client, kill the leader, watch the ensemble carry on,
# and clean everything up.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/coordrun}
DIR=$(mktemp -d -t coordrun-demo-XXXX)
BASE=${DEMO_PORT_BASE:-21810}
PEERS="1=127.0.0.1:$((BASE+10)),2=127.0.0.1:$((BASE+11)),3=127.0.0.1:$((BASE+12))"
SERVERS="127.0.0.1:$((BASE+1)),127.0.0.1:$((BASE+2)),127.0.0.1:$((BASE+3))"
declare -A PID

cleanup() {
  status=$?
  if [ "$status" -ne 0 ]; then
    echo "== demo failed; member logs:"; tail -n 20 "$DIR"/m*.log 2>/dev/null || true
  fi
  for p in "${PID[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$DIR"
  echo "== cleaned up $DIR"
}
trap cleanup EXIT

start() {
  local i=$1
  "$BIN" server --id "$i" --data-dir "$DIR/m$i" \
    --client-addr "127.0.0.1:$((BASE+i))" --peer-addr "127.0.0.1:$((BASE+9+i))" \
    --peers "$PEERS" --log-level warn 2>>"$DIR/m$i.log" &
  PID[$i]=$!
}

status() { "$BIN" ensemble status --servers "$SERVERS"; }

wait_leader() {
  for _ in $(seq 100); do
    if "$BIN" ensemble status --json --servers "$SERVERS" 2>/dev/null | grep -q '"state": "leader"'; then return 0; fi
    sleep 0.1
  done
  echo "no leader" >&2; return 1
}

echo "== starting 3 members in $DIR"
for i in 1 2 3; do start "$i"; done
"$BIN" ensemble status --servers "$SERVERS" --wait 20s

echo "== a stock ZooKeeper client (go-zookeeper) writes and watches"
go run ./examples/zkdemo -servers "$SERVERS" write

LEADER=$("$BIN" ensemble status --json --servers "$SERVERS" | sed -n 's/^  "leader": "\(.*\)",/\1/p')
echo "== kill -9 the leader (member $LEADER)"
kill -9 "${PID[$LEADER]}"; wait "${PID[$LEADER]}" 2>/dev/null || true; unset "PID[$LEADER]"
wait_leader
status

echo "== the data survived; writes go on through the new leader"
go run ./examples/zkdemo -servers "$SERVERS" check
go run ./examples/zkdemo -servers "$SERVERS" write

echo "== restart member $LEADER from its data dir; it catches up"
start "$LEADER"
"$BIN" ensemble status --servers "$SERVERS" --wait 20s
