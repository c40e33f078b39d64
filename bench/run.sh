#!/usr/bin/env bash
# fmgate's hop against a bare reverse proxy and Portkey, in one run of the
# side-by-side harness (../shared/bench by default, or BENCH_HARNESS): builds
# fmgate, then runs the harness with fmgate as its target. Every knob of the
# harness passes through (REPEAT, DURATION, CONC, BODY for streaming, …):
#
#   bench/run.sh                                       # non-streaming, CONC=50
#   BODY='{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"hi"}]}' bench/run.sh
#   FMGATE_BENCH_REDIS=127.0.0.1:6379 bench/run.sh      # fleet mode: every policy's state in Redis
#   FMGATE_BENCH_UPSTREAM=stream bench/run.sh          # every model call streamed, a JSON client's too
#   FMGATE_BIN=/tmp/fmgate-old bench/run.sh            # a binary built elsewhere (an older commit), not the tree
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
harness=${BENCH_HARNESS:-$root/../shared/bench}
[ -x "$harness/run.sh" ] || { echo "bench/run.sh: no harness at $harness (set BENCH_HARNESS)" >&2; exit 1; }
mkdir -p "$here/.bin"
if [ -n "${FMGATE_BIN:-}" ]; then
	[ -x "$FMGATE_BIN" ] || { echo "bench/run.sh: FMGATE_BIN=$FMGATE_BIN is not an executable" >&2; exit 1; }
	FMGATE_BIN=$(cd "$(dirname "$FMGATE_BIN")" && pwd)/$(basename "$FMGATE_BIN")
else
	echo "building fmgate"
	(cd "$root" && go build -o "$here/.bin/fmgate" ./cmd/fmgate)
	FMGATE_BIN=$here/.bin/fmgate
fi
port=${FMGATE_BENCH_PORT:-8080}
export FMGATE_BIN FMGATE_BENCH_PORT=$port
export TARGET_NAME=${TARGET_NAME:-fmgate}
export TARGET_CMD="$here/fmgate-target.sh"
export TARGET_URL=http://127.0.0.1:$port/v1/chat/completions
export TARGET_HEALTH=http://127.0.0.1:$port/readyz
export TARGET_HEADERS=$'Authorization: Bearer sk-bench\nContent-Type: application/json'
exec "$harness/run.sh"
