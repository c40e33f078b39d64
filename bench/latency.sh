#!/usr/bin/env bash
# What the fmgate hop adds to latency, against the bare reverse proxy of the
# side-by-side harness (../shared/bench, or BENCH_HARNESS), measured with
# bench/loadgen where hey (closed loop) cannot:
#
#   rate     open loop: each of RATES req/s for DURATION, non-streaming JSON;
#            latency from each request's scheduled start (p50/p99, added p99)
#   streams  STREAMS streaming requests ("stream":true, MOCK_CHUNKS chunks,
#            STREAM_DELAY apart) held open for DURATION, each re-sent when it
#            ends; time to the body's first byte (p50/p99 and the added p99)
#
# Starts the harness's mock upstream and bare proxy (built into its .bin if
# missing) and fmgate through bench/fmgate-target.sh (whole chain on, memory
# mode), then runs REPEAT interleaved rounds (bare, fmgate, bare, fmgate…) of
# each measurement. fmgate's degraded answers (X-Fmgate-Degraded: true, e.g.
# a fallback while a breaker is open) are counted and kept out of the figures.
# The server processes' CPU seconds per run are read from /proc (and the
# CPU per timed answer derived), with the proxy's resident memory at each
# run's end and its peak (VmRSS, VmHWM). With
# PROFILE=1, a CPU profile of fmgate is taken during its last round of each
# measurement (into the run's log folder; PROFILE_KIND=trace takes an
# execution trace instead, heap the heap's growth over the round). With PIN=1 the proxy under test
# (bare or fmgate) runs on CPU 1 and the mock and the load generator on
# CPU 0 (taskset), so that the hop's tail is not the generator's share of
# the same cores; each Go process then sees one CPU. The mock is restarted with the chunk delay between the
# two: with upstream stream, fmgate streams from the model even for a JSON client, so the rate
# measurement runs against a mock without delay. Every process started here
# is stopped on exit. Knobs (env):
#   REPEAT=3 DURATION=10 WARMUP=2 RATES=2000 MAX_INFLIGHT=4000 TIMEOUT=10s
#   STREAMS=1000 RAMP=3 STREAM_DELAY=250ms MOCK_CHUNKS=20 PHASES="streams rate" PROFILE= PIN=
# (streams first: an overloading rate opens fmgate's breakers for a while.)
#   MOCK_PORT=9200 BARE_PORT=9201 FMGATE_BENCH_PORT=8280
#   FMGATE_BIN: an fmgate binary to measure instead of one built from this tree
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
RATES=${RATES:-2000}
MAX_INFLIGHT=${MAX_INFLIGHT:-4000}
TIMEOUT=${TIMEOUT:-10s}
STREAMS=${STREAMS:-1000}
RAMP=${RAMP:-3}
STREAM_DELAY=${STREAM_DELAY:-250ms}
MOCK_CHUNKS=${MOCK_CHUNKS:-20}
PHASES=${PHASES:-streams rate}
PROFILE=${PROFILE:-}
PIN=${PIN:-}
SIDE=() HOP=()
if [[ -n $PIN ]]; then
	command -v taskset >/dev/null || die "PIN needs taskset"
	(($(nproc) >= 2)) || die "PIN needs 2 CPUs"
	SIDE=(taskset -c 0) HOP=(taskset -c 1)
fi
MOCK_PORT=${MOCK_PORT:-9200}
BARE_PORT=${BARE_PORT:-9201}
FMGATE_BENCH_PORT=${FMGATE_BENCH_PORT:-8280}

die() { echo "latency.sh: $*" >&2; exit 1; }
for r in $RATES; do [[ $r =~ ^[0-9]+$ ]] || die "RATES holds $r, not a whole number"; done
for v in REPEAT DURATION WARMUP MAX_INFLIGHT STREAMS RAMP MOCK_CHUNKS MOCK_PORT BARE_PORT FMGATE_BENCH_PORT; do
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
# stopping the group also stops the gateway fmgate-target.sh started.
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
if [[ -n ${FMGATE_BIN:-} ]]; then
	[[ -x $FMGATE_BIN ]] || die "FMGATE_BIN=$FMGATE_BIN is not an executable"
	gateway=$(cd "$(dirname "$FMGATE_BIN")" && pwd)/$(basename "$FMGATE_BIN")
else
	gateway=$here/.bin/fmgate
	(cd "$root" && go build -o "$gateway" ./cmd/fmgate) || die "go build failed"
fi
(cd "$root" && go build -o "$here/.bin/loadgen" ./bench/loadgen) || die "go build failed"

# ---------------------------------------------------------------- start
for p in "$MOCK_PORT" "$BARE_PORT" "$FMGATE_BENCH_PORT"; do port_free "$p" || die "port $p on $LOOP is in use"; done
MOCK_PID=
start_mock() { # delay
	[[ -z $MOCK_PID ]] || stop_pid "$MOCK_PID"
	start_server mockup "${SIDE[@]}" "$hbin/mockup" -addr "$LOOP:$MOCK_PORT" -chunks "$MOCK_CHUNKS" -delay "$1"
	MOCK_PID=$SPID
	wait_http mockup "$MOCK_PID" "http://$LOOP:$MOCK_PORT/health"
}
echo "== start (logs: $RUN)"
start_mock 0s
start_server bareproxy "${HOP[@]}" "$hbin/bareproxy" -addr "$LOOP:$BARE_PORT" -upstream "http://$LOOP:$MOCK_PORT"
BARE_PID=$SPID
wait_http bareproxy "$SPID" "http://$LOOP:$BARE_PORT/health"
start_server fmgate "${HOP[@]}" env MOCK_URL="$MOCK_URL" FMGATE_BIN="$gateway" FMGATE_BENCH_PORT="$FMGATE_BENCH_PORT" "$here/fmgate-target.sh"
wait_http fmgate "$SPID" "http://$LOOP:$FMGATE_BENCH_PORT/readyz"
# The target script stays as the gateway's parent (it cleans the run's
# files and keys up after it): the CPU and memory read are the gateway's.
GW_PID=$(pgrep -P "$SPID" | head -1)
[[ -n $GW_PID ]] || { echo "bench/latency.sh: fmgate-target.sh started no gateway" >&2; exit 1; }
declare -A SRV_PID=([bare]=$BARE_PID [fmgate]=$GW_PID)

declare -A URL=(
	[bare]=http://$LOOP:$BARE_PORT/v1/chat/completions
	[fmgate]=http://$LOOP:$FMGATE_BENCH_PORT/v1/chat/completions
)
JSON_BODY='{"model":"gpt-x","messages":[{"role":"user","content":"hi"}]}'
STREAM_BODY='{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"hi"}]}'

loadgen() { # system label args...
	local s=$1 label=$2
	shift 2
	"${SIDE[@]}" "$here/.bin/loadgen" -url "${URL[$s]}" -H "Authorization: Bearer sk-bench" -timeout "$TIMEOUT" \
		-exclude "X-Fmgate-Degraded: true" -label "$label" "$@"
}
cpu_s() { # pid: user + system CPU seconds so far
	awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); printf "%.2f", ($12 + $13) / hz }' "/proc/$1/stat"
}
rss_mib() { # pid field: VmRSS (now) or VmHWM (the peak so far) in MiB
	awk -v f="$2:" '$1 == f { printf "%.1f", $2 / 1024 }' "/proc/$1/status"
}
measure() { # phase system round out args...: one loadgen run, its RESULT line, the CPU it cost the servers and the proxy's memory
	local ph=$1 s=$2 r=$3 out=$4 c0 m0 c1 m1 prof=
	shift 4
	c0=$(cpu_s "${SRV_PID[$s]}") m0=$(cpu_s "$MOCK_PID")
	if [[ -n $PROFILE && $s == fmgate && $r == "$REPEAT" ]]; then
		prof=$RUN/${PROFILE_KIND:-profile}-$ph.pprof
		(sleep "$PROFILE_AFTER" && curl -fsS -H "Authorization: Bearer ${FMGATE_ADMIN_TOKEN:-bench-admin-token}" -o "$prof" \
			"http://$LOOP:$FMGATE_BENCH_PORT/debug/pprof/${PROFILE_KIND:-profile}?seconds=$((DURATION - 2))") &
		prof=$!
	fi
	loadgen "$s" "$s" "$@" >"$out"
	[[ -z $prof ]] || wait "$prof" || echo "profile failed" >&2
	c1=$(cpu_s "${SRV_PID[$s]}") m1=$(cpu_s "$MOCK_PID")
	awk -v ph="$ph" -v s="$s" -v r="$r" -v cpu="$(awk -v a="$c0" -v b="$c1" 'BEGIN { printf "%.2f", b - a }')" \
		-v mock="$(awk -v a="$m0" -v b="$m1" 'BEGIN { printf "%.2f", b - a }')" \
		-v rss="$(rss_mib "${SRV_PID[$s]}" VmRSS)" -v peak="$(rss_mib "${SRV_PID[$s]}" VmHWM)" \
		'/^RESULT / { $1 = ""; print "phase=" ph " system=" s " round=" r " cpu_s=" cpu " mock_cpu_s=" mock " rss_mib=" rss " peak_mib=" peak $0 }' "$out" >>"$RUN/rounds.txt"
	echo "  round $r $(head -n 4 "$out" | grep -v '^RESULT' | tr '\n' ' ' | tr -s ' ') | CPU: $s $(tail -n 1 "$RUN/rounds.txt" | sed -E 's/.*cpu_s=([0-9.]+) mock_cpu_s=([0-9.]+) rss_mib=([0-9.]+) peak_mib=([0-9.]+).*/\1 s, mock \2 s | RSS \3 MiB, peak \4 MiB/')"
}

echo "== machine: $(nproc) CPU(s), $(uptime | sed 's/.*load/load/')${PIN:+; pinned: proxies on CPU 1, mock and load generator on CPU 0}"
for phase in $PHASES; do
	case $phase in
		rate)
			start_mock 0s
			PROFILE_AFTER=1
			for rate in $RATES; do
				echo "== rate: $rate req/s open loop, ${DURATION}s per run, ${WARMUP}s warm-up, $REPEAT round(s)"
				for round in $(seq 1 "$REPEAT"); do
					for s in bare fmgate; do
						((WARMUP == 0)) || loadgen "$s" warmup -body "$JSON_BODY" -rate "$rate" -duration "${WARMUP}s" -max-inflight "$MAX_INFLIGHT" >/dev/null
						measure "rate@$rate" "$s" "$round" "$RUN/rate$rate-$s-r$round.txt" \
							-body "$JSON_BODY" -rate "$rate" -duration "${DURATION}s" -max-inflight "$MAX_INFLIGHT"
					done
				done
			done
			;;
		streams)
			start_mock "$STREAM_DELAY"
			echo "== streams: $STREAMS held open, $MOCK_CHUNKS chunks $STREAM_DELAY apart, ${RAMP}s ramp + ${DURATION}s, $REPEAT round(s)"
			PROFILE_AFTER=$((RAMP + 1))
			for round in $(seq 1 "$REPEAT"); do
				for s in bare fmgate; do
					measure streams "$s" "$round" "$RUN/streams-$s-r$round.txt" \
						-body "$STREAM_BODY" -streams "$STREAMS" -ramp "${RAMP}s" -duration "${DURATION}s"
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
	  ph = f["phase"]; k = ph SUBSEP f["system"]
	  if (!(ph in seen)) { seen[ph] = 1; order[++nph] = ph }
	  bad[k] += f["errors"] + f["non2xx"] + f["overflow"]; exc[k] += f["excluded"]; known[k] = 1
	  if (f["ok"] + 0 == 0) { empty[k]++; next } # nothing timed in this run (e.g. every answer degraded)
	  n[k]++; p = (ph == "streams") ? "ttfb_" : ""
	  p50[k, n[k]] = f[p "p50"]; p99[k, n[k]] = f[p "p99"]; p999[k, n[k]] = f[p "p999"]
	  rate[k, n[k]] = f["rate"]; cpu[k, n[k]] = f["cpu_s"]; rss[k, n[k]] = f["rss_mib"]
	  # CPU a timed answer: the run CPU over the answers it timed (warm-up and degraded answers aside).
	  per[k, n[k]] = 1000 * f["cpu_s"] / f["ok"]; if (f["peak_mib"] + 0 > peak[k] + 0) peak[k] = f["peak_mib"]
	  pr[ph, f["system"], f["round"]] = f[p "p99"]; rounds[ph, f["round"]] = 1 }
	function med(arr, k, m,   i, j, t, a) {
		if (m == 0) return "-"
		for (i = 1; i <= m; i++) a[i] = arr[k, i]
		for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
		return (m % 2) ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
	}
	function num(x, d) { return (x == "-") ? "-" : sprintf("%." d "f", x) }
	END {
		printf "%-10s %-7s %6s %8s %9s %9s %9s %6s %7s %7s %8s %8s %8s   %s\n", "phase", "system", "timed", "req/s", "p50_ms", "p99_ms", "p99.9_ms", "cpu_s", "cpu_ms", "rss_MiB", "peak_MiB", "err+ovf", "degraded", "added p99 ms (fmgate - bare, per round: min / median / max)"
		for (o = 1; o <= nph; o++) {
			ph = order[o]
			for (s = 0; s < 2; s++) {
				sys = s ? "fmgate" : "bare"; k = ph SUBSEP sys
				if (!(k in known)) continue
				m = n[k] + 0; added = ""
				if (sys == "fmgate") {
					c = 0; split("", d)
					for (key in rounds) { split(key, pk, SUBSEP); if (pk[1] != ph) continue
						r = pk[2]; if (((ph, "fmgate", r) in pr) && ((ph, "bare", r) in pr)) d[++c] = pr[ph, "fmgate", r] - pr[ph, "bare", r] }
					for (i = 1; i <= c; i++) for (j = i + 1; j <= c; j++) if (d[j] < d[i]) { t = d[i]; d[i] = d[j]; d[j] = t }
					added = (c == 0) ? "- (no round timed both)" : sprintf("%.3f / %.3f / %.3f (%d rounds)", d[1], (c % 2) ? d[(c + 1) / 2] : (d[c / 2] + d[c / 2 + 1]) / 2, d[c], c)
				}
				printf "%-10s %-7s %6s %8s %9s %9s %9s %6s %7s %7s %8s %8d %8d   %s\n", ph, sys, m "/" (m + empty[k]), num(med(rate, k, m), 1), num(med(p50, k, m), 3), num(med(p99, k, m), 3), num(med(p999, k, m), 3), num(med(cpu, k, m), 2), num(med(per, k, m), 3), num(med(rss, k, m), 1), num(peak[k], 1), bad[k], exc[k], added
			}
		}
	}' "$RUN/rounds.txt" | tee "$RUN/results.txt"
echo "(medians over the rounds that timed any answer (timed: such rounds / all); streams: times to the body's first byte; cpu_s: the proxy's or gateway's CPU seconds per run;"
echo " cpu_ms: those over the run's timed answers, in ms (for streams: a stream's); rss_MiB: the process's resident memory at a run's end; peak_MiB: its highest (VmHWM);"
echo " err+ovf: errors, non-2xx and overflowing sends summed over the rounds; degraded: fmgate's degraded answers, not timed; rounds in $RUN/rounds.txt)"
