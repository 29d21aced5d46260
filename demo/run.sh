#!/usr/bin/env bash
# caddy-redlock demo: 5 local Redis masters, a demo upstream that reports concurrent
# entries per resource, and two Caddy instances running Caddyfile.example on the same
# Redis nodes. Prints the commands to try, then follows the upstream's log until Ctrl-C.
#
#   bash demo/run.sh          # interactive (what `make demo` runs)
#   bash demo/run.sh --check  # run the demonstration itself, print the results, exit
#
# Everything it starts is stopped on exit (only the PIDs it started), and its files live
# in .demo/ (build output, logs) and a temporary directory (Redis data).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

MODE=interactive
case "${1:-}" in
  --check) MODE=check ;;
  "") ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

REDIS_PORTS=(7001 7002 7003 7004 7005)
UPSTREAM=127.0.0.1:9080
CADDY_PORTS=(8080 8081)
ADMIN_PORTS=(2019 2020)
DEMO="$ROOT/.demo"
PIDS=()
DATA=""

log() { printf '\033[1m==> %s\033[0m\n' "$*"; }

cleanup() {
  local status=$?
  trap - EXIT INT TERM
  if ((${#PIDS[@]})); then
    log "stopping what the demo started (PIDs ${PIDS[*]})"
    for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  fi
  [[ -n "$DATA" && -d "$DATA" ]] && rm -rf "$DATA"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

command -v go >/dev/null || { echo "Go is required (https://go.dev/dl/)" >&2; exit 1; }
bash "$(dirname "$0")/../scripts/need.sh" redis-server curl

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for p in "${REDIS_PORTS[@]}" "${CADDY_PORTS[@]}" "${ADMIN_PORTS[@]}" "${UPSTREAM##*:}"; do
  if port_busy "$p"; then echo "port $p is already in use; stop what runs there first" >&2; exit 1; fi
done

# wait_port PORT NAME: up to 10s for something to listen.
wait_port() {
  for _ in $(seq 100); do port_busy "$1" && return 0; sleep 0.1; done
  echo "$2 did not start on port $1; see $DEMO/*.log" >&2
  exit 1
}

mkdir -p "$DEMO/bin"
log "building Caddy with the redlock module and the demo upstream (the first build takes a few minutes)"
go build -o "$DEMO/bin/caddy" ./cmd/caddy
go build -o "$DEMO/bin/upstream" ./demo/upstream

DATA=$(mktemp -d "${TMPDIR:-/tmp}/redlock-demo.XXXXXX")
log "starting 5 Redis masters on ports ${REDIS_PORTS[*]} (no persistence, data in $DATA)"
for p in "${REDIS_PORTS[@]}"; do
  mkdir -p "$DATA/$p"
  redis-server --port "$p" --bind 127.0.0.1 --save "" --appendonly no --dir "$DATA/$p" \
    --daemonize no --logfile "$DEMO/redis-$p.log" &
  PIDS+=($!)
done
for p in "${REDIS_PORTS[@]}"; do wait_port "$p" "redis-server"; done

log "starting the demo upstream on $UPSTREAM"
"$DEMO/bin/upstream" -addr "$UPSTREAM" -delay 300ms >"$DEMO/upstream.log" 2>&1 &
PIDS+=($!)
wait_port "${UPSTREAM##*:}" "the upstream"

for i in 0 1; do
  log "starting Caddy #$((i + 1)) with Caddyfile.example on :${CADDY_PORTS[$i]} (admin localhost:${ADMIN_PORTS[$i]})"
  env DEMO_PORT="${CADDY_PORTS[$i]}" CADDY_ADMIN="localhost:${ADMIN_PORTS[$i]}" DEMO_UPSTREAM="$UPSTREAM" \
    XDG_CONFIG_HOME="$DEMO/xdg/config" XDG_DATA_HOME="$DEMO/xdg/data" \
    "$DEMO/bin/caddy" run --config Caddyfile.example --adapter caddyfile >"$DEMO/caddy-$((i + 1)).log" 2>&1 &
  PIDS+=($!)
done
for p in "${CADDY_PORTS[@]}"; do wait_port "$p" "caddy"; done

A=http://localhost:${CADDY_PORTS[0]}
B=http://localhost:${CADDY_PORTS[1]}

if [[ $MODE == interactive ]]; then
  cat <<EOF

Two Caddy instances ($A and $B) share 5 Redis masters; the upstream takes 300ms
per request and marks any request that enters while another for the same resource
is inside with "OVERLAP". Its log follows below. In another terminal, try:

  # 6 writes to one account, alternating between the two Caddy instances: they run
  # one after another (about 1.8s in total), no OVERLAP in the upstream log
  time (for i in 1 2 3; do curl -s -X POST $A/accounts/42/deposit & curl -s -X POST $B/accounts/42/deposit & done; wait)

  # writes to 6 different accounts run in parallel (about 0.3s)
  time (for i in 1 2 3 4 5 6; do curl -s -X POST $A/accounts/\$i/deposit & done; wait)

  # spellings of one resource take the same lock (see resource=account:42 upstream;
  # --path-as-is stops curl from cleaning the path itself)
  curl -s --path-as-is -X POST '$A//Accounts/42/./deposit'; curl -s --path-as-is -X POST '$B/accounts/%34%32/x/../deposit/'

  # more waiting than 'wait 5s' allows: some get 423 Locked with Retry-After
  for i in \$(seq 24); do curl -s -o /dev/null -w '%{http_code}\n' -X POST $A/accounts/7/deposit & done | sort | uniq -c

  # reads take the lock shared: 3 reads run together (about 0.3s), and a write waits
  # for them (and reads that come after a waiting write wait for it)
  time (for i in 1 2 3; do curl -s $A/accounts/42 & done; wait)

  # a transfer holds both accounts; opposite transfers at once do not deadlock
  (curl -s -X POST $A/transfer/1/2 & curl -s -X POST $B/transfer/2/1 & wait)

  # the fencing token sent upstream, and the upstream's totals (overlaps of writes stay 0)
  curl -s -X POST $A/docs/readme
  curl -s http://$UPSTREAM/stats

Logs: $DEMO/caddy-1.log, $DEMO/caddy-2.log, $DEMO/upstream.log. Ctrl-C stops everything.

EOF
  tail -n +1 -f "$DEMO/upstream.log" &
  PIDS+=($!)
  wait "${PIDS[-1]}"
  exit 0
fi

# --check: run the demonstration and verify what it shows.
fail() { echo "demo check FAILED: $*" >&2; exit 1; }
stats() { curl -s "http://$UPSTREAM/stats"; }
field() { stats | sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p"; }

log "6 concurrent writes to one account through both instances"
t0=$(date +%s%N)
codes=$(for i in 1 2 3; do
  curl -s -o /dev/null -w '%{http_code}\n' -X POST "$A/accounts/42/deposit" &
  curl -s -o /dev/null -w '%{http_code}\n' -X POST "$B/accounts/42/deposit" &
done; wait)
ms=$((($(date +%s%N) - t0) / 1000000))
echo "$codes" | sort | uniq -c
echo "took ${ms}ms (6 x 300ms serialized is at least 1800ms)"
[[ $(echo "$codes" | grep -c '^200$') == 6 ]] || fail "expected six 200s"
((ms >= 1800)) || fail "writes to one account were not serialized"

log "6 concurrent writes to different accounts"
t0=$(date +%s%N)
(for i in 1 2 3 4 5 6; do curl -s -o /dev/null -X POST "$A/accounts/$i/deposit" & done; wait)
ms=$((($(date +%s%N) - t0) / 1000000))
echo "took ${ms}ms (in parallel: well under 1800ms)"
((ms < 1800)) || fail "writes to different accounts did not run in parallel"

log "spellings of one resource"
for u in "$A//Accounts/42/./deposit" "$B/accounts/%34%32/x/../deposit/"; do
  out=$(curl -s --path-as-is -X POST "$u")
  echo "$out"
  [[ $out == *resource=account:42* ]] || fail "$u did not take the lock account:42"
done

log "3 concurrent reads of one account, then a write amid reads"
t0=$(date +%s%N)
(for i in 1 2 3; do curl -s -o /dev/null "$A/accounts/42" & done; wait)
ms=$((($(date +%s%N) - t0) / 1000000))
echo "took ${ms}ms (shared: together, well under 900ms)"
((ms < 900)) || fail "reads of one account did not run together"
(curl -s -o /dev/null "$A/accounts/42" & curl -s -o /dev/null "$B/accounts/42" &
  sleep 0.05; curl -s -o /dev/null -X POST "$A/accounts/42/deposit" & curl -s -o /dev/null "$B/accounts/42" & wait)

log "opposite transfers at once through both instances"
out=$( (curl -s -X POST "$A/transfer/1/2" & curl -s -X POST "$B/transfer/2/1" & wait) )
echo "$out"
[[ $(echo "$out" | grep -c 'resource=account:1 account:2') == 2 ]] || fail "transfers did not hold both accounts"

log "24 concurrent writes to one account with wait 5s"
for i in $(seq 24); do curl -s -o /dev/null -w '%{http_code}\n' -X POST "$A/accounts/7/deposit" & done | sort | uniq -c

log "upstream totals"
stats
[[ $(field overlaps) == 0 ]] || fail "the upstream saw overlapping writes"
[[ $(field stale_tokens) == 0 ]] || fail "the upstream saw a stale fencing token"
[[ $(field readers_max) -ge 2 ]] || fail "reads never ran together"
log "demo check passed: no overlapping writes, reads together, no stale tokens"
