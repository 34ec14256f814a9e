#!/usr/bin/env bash
# The README's latency and memory figures that neither bench-vs-nats.sh nor
# bench-partitions.sh measures: resident memory with 1,000,000 messages
# stored, push p99 at half the maximum push rate, and single-message push
# p50 on each node. See --help.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/bench-lib.sh
source "$ROOT/scripts/bench-lib.sh"
bench_settings bench-targets 16690 17690

FILL=1000000
HALF_COUNT=300000
SINGLE_COUNT=3000
ROUNDS=1
ROW='%-46s %-10s %s\n' # the table's columns
# The README's workload; arguments given to the script are appended to the
# fill and half-rate runs (a flag given twice: the last one wins).
DEFAULT_FLAGS=(--payload-size 256 --push-batch 100 --pop-batch 100
	--producers 8 --consumers 8 --partitions 8 --queues 1 --groups 1)

usage() {
	cat <<EOF
Usage: scripts/bench-targets.sh [--rounds N] [--fill N] [--half-count N]
                                [--single-count N] [BENCH FLAGS...]

Measures three of the README's targets on a fresh three-node Crown cluster
(a new one each round):

  1. fill: a produce-only run of --fill messages as fast as they are
     answered (its rate is "the maximum push rate"), then each node's
     resident memory (VmRSS, with RssAnon and RssFile, from
     /proc/<pid>/status) while they are all stored;        target <= 256 MB
  2. half rate: a produce-only run of --half-count more messages paced at
     half the fill's rate (crownctl bench run --rate), on top of the fill;
     its push p99                                         target <= 50 ms
  3. single push: on each node in turn, --single-count messages pushed one
     a request by one producer (--push-batch 1 --producers 1); push p50,
     the node named leader or follower                    target <= 3 ms

Options:
  --rounds N        rounds, each on a fresh cluster (default $ROUNDS)
  --fill N          messages stored before the measurements (default $FILL)
  --half-count N    messages of the half-rate run (default $HALF_COUNT)
  --single-count N  messages of each single-push run (default $SINGLE_COUNT)

Default workload of the fill and half-rate runs (the README's):
${DEFAULT_FLAGS[*]}
Any other argument goes to those two runs of crownctl bench run.

Prints a line per figure with the CPU time the hypervisor stole from the
machine meanwhile (/proc/stat; a run with steal ran on less than the
machine), saved in $WORK/summary.txt too; each run's report in
$WORK/r<ROUND>-{fill,half,single-node<N>}.json, the nodes' logs under
$CROWN_DIR. The push p99 at half rate depends on what else the nodes do
meanwhile: its line names the nodes that began a snapshot during the run
(docs/performance.md, lesson 53, measures how much that moves it).

EOF
	crown_cleanup_help
}

log() { echo "bench-targets: $*" >&2; }
die() {
	log "$*"
	exit 1
}



# latency_field FILE OP KEY: "KEY" of the object "OP" inside "latency" of a
# report written by --json (one key a line, indented by two spaces a level).
latency_field() {
	awk -v op="    \"$2\": {" -v key="      \"$3\": " '
		$0 == "  \"latency\": {" { in_lat = 1; next }
		in_lat && /^  }/ { exit }
		in_lat && $0 == op { in_op = 1; next }
		in_op && /^    }/ { in_op = 0; next }
		in_op && index($0, key) == 1 {
			v = substr($0, length(key) + 1)
			sub(/,$/, "", v)
			print v
			exit
		}' "$1"
}

# status_kib PID FIELD: FIELD (VmRSS, RssAnon, RssFile) of /proc/PID/status
# in KiB.
status_kib() {
	awk -v f="$2:" '$1 == f { print $2; exit }' "/proc/$1/status"
}

# mib KIB
mib() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }

# verdict VALUE LIMIT: "met" when VALUE <= LIMIT, else "short".
verdict() { awk -v v="$1" -v l="$2" 'BEGIN { print (v != "" && v <= l) ? "met" : "short" }'; }

# run_bench NAME URLS FLAGS...: one produce-only run, its report in
# $WORK/NAME.json; sets STOLEN to the seconds stolen meanwhile.
run_bench() {
	local name="$1" urls="$2" s0
	shift 2
	s0="$(steal_ticks)"
	"$BIN_DIR/crownctl" --url "$urls" bench run "$@" --mode produce --progress off --json >"$WORK/$name.json" 2>"$WORK/$name.log" ||
		die "the $name run failed (see $WORK/$name.log and .json)"
	STOLEN="$(cpu_seconds $(($(steal_ticks) - s0)))"
}

# snapshots N: how many snapshots node N (1..3) has begun to take, from its
# log (raftnode logs "taking a snapshot" as it asks Raft for one).
snapshots() {
	grep -c 'taking a snapshot' "$CROWN_DIR/node$1.log" || true
}

# node_role N: "leader" or "follower", as node N (1..3) sees itself.
node_role() {
	local url="http://$HOST:$((CROWN_HTTP + $1 - 1))"
	if curl -fsS --max-time 5 "$url/health" | grep -q '"state":"Leader"'; then
		echo leader
	else
		echo follower
	fi
}

round() {
	local r="$1" rate half n pid rss anon file p99 p50 role
	rm -rf -- "$CROWN_DIR"
	crown_cluster start >&2

	log "round $r: filling with $FILL messages"
	run_bench "r$r-fill" "$(crown_urls)" "${DEFAULT_FLAGS[@]}" "${EXTRA_FLAGS[@]}" --count "$FILL"
	rate="$(report_field "$WORK/r$r-fill.json" produce msg_per_s)"
	[[ "$rate" =~ ^[0-9]+$ && "$rate" -gt 0 ]] || die "r$r-fill.json: no produce rate"
	# shellcheck disable=SC2059 # ROW is the format
	printf "$ROW" "round $r: fill of $FILL, msg/s" "$rate" "(stolen ${STOLEN} s)" | out
	for n in 1 2 3; do
		pid="$(cat "$CROWN_DIR/node$n.pid")"
		rss="$(status_kib "$pid" VmRSS)"
		anon="$(status_kib "$pid" RssAnon)"
		file="$(status_kib "$pid" RssFile)"
		# shellcheck disable=SC2059
		printf "$ROW" "round $r: node$n resident MiB, $FILL stored" "$(mib "$rss")" \
			"$(verdict "$((rss * 1024))" 256000000) (<= 256 MB; anon $(mib "$anon"), file $(mib "$file"))" | out
	done

	half=$((rate / 2))
	log "round $r: $HALF_COUNT messages at $half msg/s"
	local -a snaps=()
	for n in 1 2 3; do snaps[n]="$(snapshots "$n")"; done
	run_bench "r$r-half" "$(crown_urls)" "${DEFAULT_FLAGS[@]}" "${EXTRA_FLAGS[@]}" --count "$HALF_COUNT" \
		--rate "$half"
	p99="$(latency_field "$WORK/r$r-half.json" push p99_ms)"
	local during=""
	for n in 1 2 3; do
		if (($(snapshots "$n") > snaps[n])); then during+=" node$n"; fi
	done
	# shellcheck disable=SC2059
	printf "$ROW" "round $r: push p99 ms at $half msg/s" "$p99" \
		"$(verdict "$p99" 50) (<= 50 ms; stolen ${STOLEN} s; snapshots begun during the run:${during:- none})" | out

	for n in 1 2 3; do
		role="$(node_role "$n")"
		log "round $r: $SINGLE_COUNT single-message pushes on node$n ($role)"
		run_bench "r$r-single-node$n" "http://$HOST:$((CROWN_HTTP + n - 1))" --payload-size 256 \
			--push-batch 1 --producers 1 --partitions 8 --count "$SINGLE_COUNT"
		p50="$(latency_field "$WORK/r$r-single-node$n.json" push p50_ms)"
		# shellcheck disable=SC2059
		printf "$ROW" "round $r: single push p50 ms, node$n ($role)" "$p50" \
			"$(verdict "$p50" 3) (<= 3 ms; stolen ${STOLEN} s)" | out
	done
	crown_cluster stop >&2
}

main() {
	EXTRA_FLAGS=()
	while (($#)); do
		case "$1" in
		-h | --help | help)
			usage
			return 0
			;;
		--rounds | --fill | --half-count | --single-count)
			[[ "${2:-}" =~ ^[1-9][0-9]*$ ]] || die "$1 needs a positive whole number"
			case "$1" in
			--rounds) ROUNDS="$2" ;;
			--fill) FILL="$2" ;;
			--half-count) HALF_COUNT="$2" ;;
			--single-count) SINGLE_COUNT="$2" ;;
			esac
			shift 2
			;;
		--mode | --mode=* | --rate | --rate=* | --count | --count=*)
			die "$1: set by this script per run"
			;;
		*)
			EXTRA_FLAGS+=("$1")
			shift
			;;
		esac
	done
	command -v curl >/dev/null || die "curl is needed (to ask each node whether it leads)"

	log "building bin/crownd and bin/crownctl"
	make -C "$ROOT" --no-print-directory build >&2

	trap_crown_cleanup
	# Leftovers of an interrupted run: stop what we started, then start afresh.
	if [[ -d "$CROWN_DIR" ]]; then crown_cluster stop >&2; fi
	mkdir -p -- "$WORK"
	rm -f -- "$WORK"/r*-*.json # no earlier run's report is read as this one's
	local load r
	load="$(cut -d' ' -f1-3 /proc/loadavg)"
	: >"$WORK/summary.txt"
	log "workload: ${DEFAULT_FLAGS[*]} ${EXTRA_FLAGS[*]}; $ROUNDS round(s)"
	for ((r = 1; r <= ROUNDS; r++)); do
		round "$r"
	done
	echo "machine: $(nproc) cores, load average before the runs: $load" | out
}

main "$@"
