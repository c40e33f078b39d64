#!/usr/bin/env bash
# fmgate's CPU per request at a fixed rate, for two or more fmgate binaries
# in alternated rounds: the figure that stays comparable on a shared
# machine, where req/s and tail latency move with the neighbours' load.
#
#   bench/cpuab.sh OLD_BINARY NEW_BINARY [MORE…]
#
# Starts the harness's mock upstream (../shared/bench, or BENCH_HARNESS),
# then for each round and each binary starts it through
# bench/fmgate-target.sh (the whole chain on, memory mode; every
# FMGATE_BENCH_* knob applies), sends WARMUP seconds of load, then RATE
# req/s for DURATION seconds of JSON chat completions with bench/loadgen
# (open loop), and reads the gateway's user + system CPU from /proc. Prints
# one line per run and the median CPU-µs per answered request per binary.
# In fleet mode (FMGATE_BENCH_REDIS=HOST:PORT, a Redis on this machine) the
# Redis server's CPU per request is read and reported beside it.
# Knobs (env): RATE=400 DURATION=10 WARMUP=2 REPEAT=3 BODY (default: a short
# JSON chat completion) MOCK_PORT=9300 FMGATE_BENCH_PORT=8380.
set -euo pipefail
export LC_ALL=C
(($# >= 2)) || { echo "usage: bench/cpuab.sh BINARY BINARY [BINARY…]" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
harness=${BENCH_HARNESS:-$root/../shared/bench}
RATE=${RATE:-400} DURATION=${DURATION:-10} WARMUP=${WARMUP:-2} REPEAT=${REPEAT:-3}
BODY=${BODY:-'{"model":"gpt-x","messages":[{"role":"user","content":"hi"}]}'}
MOCK_PORT=${MOCK_PORT:-9300}
export FMGATE_BENCH_PORT=${FMGATE_BENCH_PORT:-8380}
bins=()
for b in "$@"; do
	[[ -x $b ]] || { echo "bench/cpuab.sh: $b is not an executable" >&2; exit 2; }
	bins+=("$(cd "$(dirname "$b")" && pwd)/$(basename "$b")")
done
[[ -x $harness/.bin/mockup ]] || (cd "$harness/mockup" && go build -o "$harness/.bin/mockup" .)
mkdir -p "$here/.bin"
(cd "$root" && go build -o "$here/.bin/loadgen" ./bench/loadgen)
log=$(mktemp -d "${TMPDIR:-/tmp}/fmgate-cpuab.XXXXXX")
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM
wait_up() { # url: until it answers 200, 10 s at most
	for _ in $(seq 100); do curl -fsS -o /dev/null "$1" 2>/dev/null && return 0; sleep 0.1; done
	echo "bench/cpuab.sh: $1 did not come up (logs in $log)" >&2
	exit 1
}
cpu_s() { awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); printf "%.3f", ($12 + $13) / hz }' "/proc/$1/stat"; }

redis_pid=
if [[ -n ${FMGATE_BENCH_REDIS:-} ]]; then
	redis_pid=$(redis-cli -h "${FMGATE_BENCH_REDIS%:*}" -p "${FMGATE_BENCH_REDIS##*:}" info server | tr -d '\r' | awk -F: '$1 == "process_id" { print $2 }')
	[[ -r /proc/$redis_pid/stat ]] || { echo "bench/cpuab.sh: the Redis at $FMGATE_BENCH_REDIS is not a process of this machine" >&2; exit 2; }
fi
"$harness/.bin/mockup" -addr "127.0.0.1:$MOCK_PORT" >"$log/mock.log" 2>&1 &
pids+=($!)
wait_up "http://127.0.0.1:$MOCK_PORT/health"
export MOCK_URL=http://127.0.0.1:$MOCK_PORT/v1
url=http://127.0.0.1:$FMGATE_BENCH_PORT/v1/chat/completions
load() { "$here/.bin/loadgen" -url "$url" -H "Authorization: Bearer sk-bench" -body "$BODY" -rate "$RATE" -max-inflight 2000 "$@"; }

echo "== $(nproc) CPU(s), $(uptime | sed 's/.*load/load/'); $RATE req/s for ${DURATION}s, $REPEAT round(s)"
for r in $(seq 1 "$REPEAT"); do
	for i in "${!bins[@]}"; do
		FMGATE_BIN=${bins[$i]} "$here/fmgate-target.sh" >"$log/fmgate-$i-$r.log" 2>&1 &
		gw=$!
		wait_up "http://127.0.0.1:$FMGATE_BENCH_PORT/readyz"
		proc=$(pgrep -P "$gw" | head -1) # the target script is the gateway's parent
		load -duration "${WARMUP}s" >/dev/null
		c0=$(cpu_s "$proc")
		r0=$([[ -z $redis_pid ]] || cpu_s "$redis_pid")
		load -duration "${DURATION}s" >"$log/load-$i-$r.txt"
		c1=$(cpu_s "$proc")
		r1=$([[ -z $redis_pid ]] || cpu_s "$redis_pid")
		kill "$gw"
		wait "$gw" 2>/dev/null || true
		field() { awk -v f="$1" '/^RESULT /{for(k=2;k<=NF;k++){split($k,a,"=");if(a[1]==f)print a[2]}}' "$log/load-$i-$r.txt"; }
		ok=$(field ok)
		[[ -n $ok && $ok -gt 0 ]] || { echo "bench/cpuab.sh: no answers from ${bins[$i]} (see $log)" >&2; exit 1; }
		us=$(awk -v a="$c0" -v b="$c1" -v n="$ok" 'BEGIN { printf "%.0f", (b - a) * 1e6 / n }')
		rus=
		if [[ -n $redis_pid ]]; then
			rus=$(awk -v a="$r0" -v b="$r1" -v n="$ok" 'BEGIN { printf "%.0f", (b - a) * 1e6 / n }')
			echo "$i $rus" >>"$log/redis"
			rus="  redis-cpu-µs/req $rus"
		fi
		echo "round $r  ${bins[$i]}  cpu-µs/req $us$rus  ok $ok  excluded $(field excluded)  p50 $(field p50) ms  p99 $(field p99) ms"
		echo "$i $us" >>"$log/results"
	done
done
echo "== median CPU-µs per request"
median() { awk -v i="$1" '$1 == i { print $2 }' "$2" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
for i in "${!bins[@]}"; do
	printf '%-40s %s%s\n' "${bins[$i]}" "$(median "$i" "$log/results")" "$([[ -z $redis_pid ]] || echo "  (Redis $(median "$i" "$log/redis"))")"
done
