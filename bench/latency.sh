#!/usr/bin/env bash
# What the fmgate hop adds to latency, against the bare reverse proxy of the
# side-by-side harness (../shared/bench, or BENCH_HARNESS), measured with
# bench/loadgen where hey (closed loop) cannot:
#
#   rate     open loop: RATE req/s for DURATION, non-streaming JSON; latency
#            from each request's scheduled start (p50/p99 and the added p99)
#   streams  STREAMS streaming requests ("stream":true, MOCK_CHUNKS chunks,
#            STREAM_DELAY apart) held open for DURATION, each re-sent when it
#            ends; time to the body's first byte (p50/p99 and the added p99)
#
# Starts the harness's mock upstream and bare proxy (built into its .bin if
# missing) and fmgate through bench/fmgate-target.sh (whole chain on, memory
# mode), then runs REPEAT interleaved rounds (bare, fmgate, bare, fmgate…) of
# each measurement. The mock is restarted with the chunk delay between the
# two: fmgate streams from the model even for a JSON client, so the rate
# measurement runs against a mock without delay. Every process started here
# is stopped on exit. Knobs (env):
#   REPEAT=3 DURATION=10 WARMUP=2 RATE=2000 MAX_INFLIGHT=4000 TIMEOUT=10s
#   STREAMS=1000 RAMP=3 STREAM_DELAY=250ms MOCK_CHUNKS=20 PHASES="rate streams"
#   MOCK_PORT=9200 BARE_PORT=9201 FMGATE_BENCH_PORT=8280
#
#   bench/latency.sh
set -euo pipefail
export LC_ALL=C

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
harness=${BENCH_HARNESS:-$root/../shared/bench}
hbin=$harness/.bin

REPEAT=${REPEAT:-3}
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
RATE=${RATE:-2000}
MAX_INFLIGHT=${MAX_INFLIGHT:-4000}
TIMEOUT=${TIMEOUT:-10s}
STREAMS=${STREAMS:-1000}
RAMP=${RAMP:-3}
STREAM_DELAY=${STREAM_DELAY:-250ms}
MOCK_CHUNKS=${MOCK_CHUNKS:-20}
PHASES=${PHASES:-rate streams}
MOCK_PORT=${MOCK_PORT:-9200}
BARE_PORT=${BARE_PORT:-9201}
FMGATE_BENCH_PORT=${FMGATE_BENCH_PORT:-8280}

die() { echo "latency.sh: $*" >&2; exit 1; }
for v in REPEAT DURATION WARMUP RATE MAX_INFLIGHT STREAMS RAMP MOCK_CHUNKS MOCK_PORT BARE_PORT FMGATE_BENCH_PORT; do
	[[ ${!v} =~ ^[0-9]+$ ]] || die "$v=${!v} must be a whole number"
done
for t in curl go setsid ps awk; do command -v "$t" >/dev/null || die "needs $t on PATH"; done
[[ -d $harness/mockup && -d $harness/bareproxy ]] || die "no harness at $harness (set BENCH_HARNESS)"

# 1,000 streams are 2,000+ sockets in this process tree alone.
ulimit -n "$(ulimit -Hn)" || true
(($(ulimit -n) >= 4 * STREAMS + 1024)) || echo "warning: ulimit -n is $(ulimit -n), low for $STREAMS streams" >&2

LOOP=127.0.0.1
MOCK_URL=http://$LOOP:$MOCK_PORT/v1
RUN=$here/.logs/latency-$(date +%Y%m%d-%H%M%S)
mkdir -p "$here/.bin" "$hbin" "$RUN"

# ---------------------------------------------------------------- processes
# Servers run under setsid, so each PID is also its process group's id;
# stopping the group also stops what fmgate-target.sh's exec chain forked.
declare -A PIDS=()
alive() { local st; st=$(ps -o stat= -p "$1" 2>/dev/null) && [[ $st != Z* ]]; }
stop_pid() {
	local pid=$1 _
	kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
	for _ in $(seq 1 50); do alive "$pid" || break; sleep 0.1; done
	kill -KILL -- "-$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	unset "PIDS[$pid]"
}
cleanup() {
	trap - EXIT INT TERM
	local pid
	for pid in "${!PIDS[@]}"; do stop_pid "$pid"; done
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

start_server() { # name cmd... ; sets SPID
	local name=$1
	shift
	(exec setsid "$@" </dev/null >>"$RUN/$name.log" 2>&1) &
	SPID=$!
	PIDS[$SPID]=$name
}
wait_http() { # name pid url
	local i
	for i in $(seq 1 150); do
		curl -fs -o /dev/null --max-time 1 "$3" && return 0
		alive "$2" || { tail -n 20 "$RUN/$1.log" >&2; die "$1 exited during start-up"; }
		sleep 0.2
	done
	die "$1 did not answer on $3 within 30 s"
}
port_free() { local rc=0; curl -s -o /dev/null --max-time 1 "http://$LOOP:$1/" || rc=$?; [[ $rc == 7 ]]; }

# ---------------------------------------------------------------- build
echo "== build"
for prog in mockup bareproxy; do
	[[ -x $hbin/$prog ]] || (cd "$harness/$prog" && go build -buildvcs=false -trimpath -o "$hbin/$prog" .) || die "go build $prog failed"
done
(cd "$root" && go build -o "$here/.bin/fmgate" ./cmd/fmgate && go build -o "$here/.bin/loadgen" ./bench/loadgen) || die "go build failed"

# ---------------------------------------------------------------- start
for p in "$MOCK_PORT" "$BARE_PORT" "$FMGATE_BENCH_PORT"; do port_free "$p" || die "port $p on $LOOP is in use"; done
MOCK_PID=
start_mock() { # delay
	[[ -z $MOCK_PID ]] || stop_pid "$MOCK_PID"
	start_server mockup "$hbin/mockup" -addr "$LOOP:$MOCK_PORT" -chunks "$MOCK_CHUNKS" -delay "$1"
	MOCK_PID=$SPID
	wait_http mockup "$MOCK_PID" "http://$LOOP:$MOCK_PORT/health"
}
echo "== start (logs: $RUN)"
start_mock 0s
start_server bareproxy "$hbin/bareproxy" -addr "$LOOP:$BARE_PORT" -upstream "http://$LOOP:$MOCK_PORT"
wait_http bareproxy "$SPID" "http://$LOOP:$BARE_PORT/health"
start_server fmgate env MOCK_URL="$MOCK_URL" FMGATE_BIN="$here/.bin/fmgate" FMGATE_BENCH_PORT="$FMGATE_BENCH_PORT" "$here/fmgate-target.sh"
wait_http fmgate "$SPID" "http://$LOOP:$FMGATE_BENCH_PORT/readyz"

declare -A URL=(
	[bare]=http://$LOOP:$BARE_PORT/v1/chat/completions
	[fmgate]=http://$LOOP:$FMGATE_BENCH_PORT/v1/chat/completions
)
JSON_BODY='{"model":"gpt-x","messages":[{"role":"user","content":"hi"}]}'
STREAM_BODY='{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"hi"}]}'

loadgen() { # system label args...
	local s=$1 label=$2
	shift 2
	"$here/.bin/loadgen" -url "${URL[$s]}" -H "Authorization: Bearer sk-bench" -timeout "$TIMEOUT" -label "$label" "$@"
}
record() { # phase system round file: the RESULT line, prefixed
	awk -v ph="$1" -v s="$2" -v r="$3" '/^RESULT / { $1 = ""; print "phase=" ph " system=" s " round=" r $0 }' "$4" >>"$RUN/rounds.txt"
}

echo "== machine: $(nproc) CPU(s), $(uptime | sed 's/.*load/load/')"
for phase in $PHASES; do
	case $phase in
		rate)
			start_mock 0s
			echo "== rate: $RATE req/s open loop, ${DURATION}s per run, ${WARMUP}s warm-up, $REPEAT round(s)"
			for round in $(seq 1 "$REPEAT"); do
				for s in bare fmgate; do
					((WARMUP == 0)) || loadgen "$s" warmup -body "$JSON_BODY" -rate "$RATE" -duration "${WARMUP}s" -max-inflight "$MAX_INFLIGHT" >/dev/null
					out=$RUN/rate-$s-r$round.txt
					loadgen "$s" "$s" -body "$JSON_BODY" -rate "$RATE" -duration "${DURATION}s" -max-inflight "$MAX_INFLIGHT" >"$out"
					record rate "$s" "$round" "$out"
					echo "  round $round $(head -n 3 "$out" | tr '\n' ' ' | tr -s ' ')"
				done
			done
			;;
		streams)
			start_mock "$STREAM_DELAY"
			echo "== streams: $STREAMS held open, $MOCK_CHUNKS chunks $STREAM_DELAY apart, ${RAMP}s ramp + ${DURATION}s, $REPEAT round(s)"
			for round in $(seq 1 "$REPEAT"); do
				for s in bare fmgate; do
					out=$RUN/streams-$s-r$round.txt
					loadgen "$s" "$s" -body "$STREAM_BODY" -streams "$STREAMS" -ramp "${RAMP}s" -duration "${DURATION}s" >"$out"
					record streams "$s" "$round" "$out"
					echo "  round $round $(head -n 3 "$out" | tr '\n' ' ' | tr -s ' ')"
				done
			done
			;;
		*) die "unknown phase $phase" ;;
	esac
	echo "   $(uptime | sed 's/.*load/load/')"
done

# ---------------------------------------------------------------- table
# Per phase: each system's median p50/p99 over the rounds, and the added
# p99 (fmgate − bare) of each round, paired, as min / median / max. For
# streams the figures are the time to the body's first byte.
awk '
	{ for (i = 1; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
	  k = f["phase"] SUBSEP f["system"]; n[k]++
	  p = (f["phase"] == "streams") ? "ttfb_" : ""
	  p50[k, n[k]] = f[p "p50"]; p99[k, n[k]] = f[p "p99"]; p999[k, n[k]] = f[p "p999"]
	  bad[k] += f["errors"] + f["non2xx"] + f["overflow"]; rate[k, n[k]] = f["rate"]
	  pr[f["phase"], f["system"], f["round"]] = f[p "p99"]; rounds[f["phase"], f["round"]] = 1; phases[f["phase"]] = 1 }
	function med(arr, k, m,   i, j, t, a) {
		for (i = 1; i <= m; i++) a[i] = arr[k, i]
		for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
		return (m % 2) ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
	}
	END {
		printf "%-8s %-7s %9s %10s %10s %10s %13s   %s\n", "phase", "system", "req/s", "p50_ms", "p99_ms", "p99.9_ms", "err+non2xx+ovf", "added p99 ms (fmgate - bare, per round: min / median / max)"
		for (ph in phases) {
			for (s = 0; s < 2; s++) {
				sys = s ? "fmgate" : "bare"; k = ph SUBSEP sys
				if (!(k in n)) continue
				added = ""
				if (sys == "fmgate") {
					m = 0
					for (key in rounds) { split(key, pk, SUBSEP); if (pk[1] != ph) continue
						r = pk[2]; if (((ph, "fmgate", r) in pr) && ((ph, "bare", r) in pr)) d[++m] = pr[ph, "fmgate", r] - pr[ph, "bare", r] }
					for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (d[j] < d[i]) { t = d[i]; d[i] = d[j]; d[j] = t }
					if (m > 0) added = sprintf("%.3f / %.3f / %.3f", d[1], (m % 2) ? d[(m + 1) / 2] : (d[m / 2] + d[m / 2 + 1]) / 2, d[m])
				}
				printf "%-8s %-7s %9.1f %10.3f %10.3f %10.3f %13d   %s\n", ph, sys, med(rate, k, n[k]), med(p50, k, n[k]), med(p99, k, n[k]), med(p999, k, n[k]), bad[k], added
			}
		}
	}' "$RUN/rounds.txt" | tee "$RUN/results.txt"
echo "(streams: the times are to the body's first byte; rounds in $RUN/rounds.txt)"
