#!/usr/bin/env bash
# Starts a fleet of two fmgate gateways and one ingester on this host, from
# fleet.yaml, and checks that one conversation moves between the instances:
# its first turn is asked of gw1, its second ("how much is it?") of gw2,
# which must know what "it" is.
#
# Needs Redis on 127.0.0.1:6379, NATS with JetStream on 127.0.0.1:4222 and
# PostgreSQL on 127.0.0.1:5432 (user postgres), and Go to build fmgate.
# Creates the database fmgate_example when it is missing.
#
# Environment: WORK (default examples/fleet/run: binaries, working
# directories, logs), PORT1 and PORT2 (8081, 8082), CHECK_ONLY=1 to stop
# after the check instead of serving until Ctrl-C.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
work=${WORK:-$here/run}
port1=${PORT1:-8081}
port2=${PORT2:-8082}
export FMGATE_ADMIN_TOKEN=${FMGATE_ADMIN_TOKEN:-fleet-example-admin}
export FMGATE_HASH_SECRET=${FMGATE_HASH_SECRET:-fleet-example-hash-secret}

say() { printf '%s\n' "$*"; }
fail() { printf 'run.sh: %s\n' "$*" >&2; exit 1; }

# Each service must answer within two seconds.
for svc in "Redis 6379" "NATS 4222" "PostgreSQL 5432"; do
	set -- $svc
	timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$2" 2>/dev/null ||
		fail "$1 does not answer on 127.0.0.1:$2; start it first (see docs/fleet.md)"
done

mkdir -p "$work"/{gw1,gw2,ingest}
say "building fmgate (the first build takes a few minutes) …"
(cd "$repo" && go build -o "$work/fmgate" ./cmd/fmgate)
fmgate="$work/fmgate"

if ! psql -h 127.0.0.1 -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'fmgate_example'" | grep -q 1; then
	createdb -h 127.0.0.1 -U postgres fmgate_example || fail "could not create the database fmgate_example"
	say "created the database fmgate_example"
fi
"$fmgate" validate -config "$here/fleet.yaml"

pids=()
stop() {
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap stop EXIT

(cd "$work/ingest" && exec "$fmgate" ingest -config "$here/fleet.yaml" >ingest.log 2>&1) & pids+=($!)
(cd "$work/gw1" && FMGATE_INSTANCE_ID=gw1 exec "$fmgate" serve -config "$here/fleet.yaml" -addr "127.0.0.1:$port1" >gw.log 2>&1) & pids+=($!)
(cd "$work/gw2" && FMGATE_INSTANCE_ID=gw2 exec "$fmgate" serve -config "$here/fleet.yaml" -addr "127.0.0.1:$port2" >gw.log 2>&1) & pids+=($!)

for port in "$port1" "$port2"; do
	for i in $(seq 1 120); do
		curl -fsS -m 1 "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
		[ "$i" = 120 ] && fail "the gateway on :$port is not ready after 60 s; see $work/gw*/gw.log"
		sleep 0.5
	done
done
say "gw1 on http://127.0.0.1:$port1, gw2 on http://127.0.0.1:$port2, the ingester writing PostgreSQL"
grep -m1 "^mode:" "$work/gw1/gw.log" || true

session="fleet-check-$$-$RANDOM"
ask() { # port message
	curl -fsS -m 30 "http://127.0.0.1:$1/v1/chat" -H 'Content-Type: application/json' -H 'X-User-Id: fleet-example' \
		-d "{\"sessionId\":\"$session\",\"message\":\"$2\",\"locale\":\"ja\"}"
}
first=$(ask "$port1" "ワンピースの最新刊はいつ出ますか？") || fail "gw1 did not answer the first turn"
second=$(ask "$port2" "それはいくらですか？") || fail "gw2 did not answer the second turn"
say "gw1: $first"
say "gw2: $second"
case "$second" in
*ワンピース*) say "ok: the conversation moved from gw1 to gw2 (gw2 knew what 'it' was)" ;;
*) fail "gw2's answer does not name ワンピース: the conversation did not move between the instances" ;;
esac

if [ "${CHECK_ONLY:-}" = 1 ]; then
	exit 0
fi
say "serving until Ctrl-C (admin token: $FMGATE_ADMIN_TOKEN; dashboard: http://127.0.0.1:$port1/dashboard)"
wait
