#!/usr/bin/env bash
# A CPU (and heap allocation) profile of fmgate under the side-by-side
# harness's load: runs bench/run.sh with fmgate alone (SYSTEMS=target, one
# round), and while the load runs takes /debug/pprof/profile and
# /debug/pprof/allocs from the gateway with the admin token. Every knob of
# bench/run.sh passes through (BODY for streaming, CONC, …):
#
#   bench/profile.sh                  # writes bench/.prof/cpu.pprof, allocs.pprof
#   go tool pprof -top bench/.bin/fmgate bench/.prof/cpu.pprof
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${PROFILE_DIR:-$here/.prof}
secs=${PROFILE_SECONDS:-10}
port=${FMGATE_BENCH_PORT:-8080}
export FMGATE_ADMIN_TOKEN=${FMGATE_ADMIN_TOKEN:-bench-admin-token}
export SYSTEMS=target REPEAT=1 WARMUP=${WARMUP:-2} DURATION=${DURATION:-$((secs + 6))}
mkdir -p "$out"
"$here/run.sh" >"$out/run.log" 2>&1 &
runner=$!
# The profile starts once the load does: after the build, the smoke test
# and the warm-up.
for _ in $(seq 600); do
	grep -q '^== load' "$out/run.log" 2>/dev/null && break
	kill -0 "$runner" 2>/dev/null || { cat "$out/run.log" >&2; exit 1; }
	sleep 0.5
done
sleep $((WARMUP + 2))
auth="Authorization: Bearer $FMGATE_ADMIN_TOKEN"
curl -fsS -H "$auth" -o "$out/cpu.pprof" "http://127.0.0.1:$port/debug/pprof/profile?seconds=$secs"
curl -fsS -H "$auth" -o "$out/allocs.pprof" "http://127.0.0.1:$port/debug/pprof/allocs"
wait "$runner" || true
tail -n 8 "$out/run.log"
echo "profiles in $out: go tool pprof -top $here/.bin/fmgate $out/cpu.pprof"
