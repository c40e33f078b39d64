#!/usr/bin/env bash
# Starts fmgate as the benchmark harness's target (TARGET_CMD): its OpenAI
# front door on 127.0.0.1:${FMGATE_BENCH_PORT:-8080}, in front of the
# harness's mock upstream ($MOCK_URL) through the openai provider, with the
# whole chain on in memory mode: an API key, every rate-limit scope decided
# (limits set high enough not to refuse), budgets, quota reservation, the
# breaker and retry wrapper, events to the write-ahead log and the embedded
# event store, Prometheus metrics and the live figures. With
# FMGATE_BENCH_REDIS=HOST:PORT it runs in fleet mode instead: every policy's
# state in that Redis, under a key prefix of its own. FMGATE_BENCH_UPSTREAM
# is the model tiers' upstream: auto (the default: a JSON client's answer
# asked for whole, a streaming client's streamed), client, or stream (every
# answer streamed from the mock, first-token and idle deadlines on).
# FMGATE_BENCH_STORE=off runs it without the embedded event store.
set -euo pipefail
: "${MOCK_URL:?MOCK_URL, the /v1 URL of the mock upstream, must be set}"
here=$(cd "$(dirname "$0")" && pwd)
bin=${FMGATE_BIN:-$here/.bin/fmgate}
work=$(mktemp -d "${TMPDIR:-/tmp}/fmgate-bench.XXXXXX")
upstream=${FMGATE_BENCH_UPSTREAM:-auto}
sed -e "s#@MOCK_URL@#$MOCK_URL#g" -e "s#@WORK@#$work#g" -e "s#@UPSTREAM@#$upstream#g" "$here/fmgate-bench.yaml" >"$work/fmgate.yaml"
if [ "${FMGATE_BENCH_STORE:-on}" = off ]; then
	# Without the embedded event store (events still go to the write-ahead
	# log): how much of the hop's cost is the store's.
	sed -i 's#^eventStore:.*#eventStore: {path: ""}#' "$work/fmgate.yaml"
fi
if [ -n "${FMGATE_BENCH_REDIS:-}" ]; then
	printf 'fleet:\n  redis: "%s"\n  keyPrefix: "fmgate-bench-%s:"\n' "$FMGATE_BENCH_REDIS" "$$" >>"$work/fmgate.yaml"
fi
export FMGATE_ADMIN_TOKEN=${FMGATE_ADMIN_TOKEN:-bench-admin-token}
export BENCH_UPSTREAM_KEY=sk-mock
cd "$work"
serve=("$bin" serve -config "$work/fmgate.yaml" -addr "127.0.0.1:${FMGATE_BENCH_PORT:-8080}" -log-level warn)
"${serve[@]}" &
gw=$!
# The run's files (its event store, keys, write-ahead log) and, in fleet
# mode, its Redis keys (sessions, counters, windows) go with it.
forget() {
	kill -TERM "$gw" 2>/dev/null || true
	wait "$gw" 2>/dev/null || true
	if [ -n "${FMGATE_BENCH_REDIS:-}" ]; then
		redis-cli -h "${FMGATE_BENCH_REDIS%:*}" -p "${FMGATE_BENCH_REDIS##*:}" --scan --pattern "fmgate-bench-$$:*" |
			xargs -r -n 1000 redis-cli -h "${FMGATE_BENCH_REDIS%:*}" -p "${FMGATE_BENCH_REDIS##*:}" del >/dev/null || true
	fi
	cd / && rm -rf "$work"
}
trap 'forget; exit 0' TERM INT
wait "$gw" || true
forget
