#!/usr/bin/env bash
# The README's "10,000 partitions" figures: the same workload over 8
# partitions and over many, each on a fresh three-node Crown cluster, a
# produce-only run then a consume-only run of its messages, in rounds that
# alternate which goes first. See --help.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/bench-lib.sh
source "$ROOT/scripts/bench-lib.sh"
bench_settings bench-partitions 16680 17680

ROUNDS=3
MANY=10000
ROW='%5s %10s %8s %10s %18s %9s\n' # the table's columns
# The README's workload; --partitions is set per run, and arguments given to
# the script are appended (a flag given twice: the last one wins).
DEFAULT_FLAGS=(--count 300000 --payload-size 256 --push-batch 100 --pop-batch 100
	--producers 8 --consumers 8 --queues 1 --groups 1 --pop-partitions 4)

usage() {
	cat <<EOF
Usage: scripts/bench-partitions.sh [--rounds N] [--many N] [BENCH FLAGS...]

Measures how a three-node Crown cluster does over many partitions against
8: in each round, for 8 partitions and for --many partitions, a fresh
cluster, a produce-only run (crownctl bench run --mode produce) and a
consume-only run of the same messages (--mode consume, which checks that
every message was delivered exactly once), then the cluster is stopped and
deleted. Odd rounds run 8 partitions first, even rounds --many first, so
that neither always runs on a machine still writing back the other's files.

Options:
  --rounds N   rounds to run (default $ROUNDS)
  --many N     partitions to compare with 8 (default $MANY)

Default workload (the README's): ${DEFAULT_FLAGS[*]}
Any other argument goes to every run of crownctl bench run (but
--partitions, which is 8 or --many).

Prints a line per run: messages/s, the servers' CPU (user+system of the
three nodes) per message, and the CPU time the hypervisor stole from the
machine meanwhile (/proc/stat; a run with steal ran on less than the
machine); then, per round, the many-partition rates as percentages of the
8-partition ones. Also saved in $WORK/summary.txt, each run's reports in
$WORK/p<PARTITIONS>-r<ROUND>-{produce,consume}.json, the nodes' logs under
$CROWN_DIR.

EOF
	crown_cleanup_help
}

log() { echo "bench-partitions: $*" >&2; }
die() {
	log "$*"
	exit 1
}



# per_message SECONDS MESSAGES: microseconds a message, "-" without messages.
per_message() {
	awk -v s="$1" -v n="$2" 'BEGIN { if (n > 0) printf "%.1f", s * 1e6 / n; else print "-" }'
}

# percent A B: A as a percentage of B, "-" when B is 0.
percent() {
	awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.1f %%", 100 * a / b; else print "-" }'
}

# measure PARTITIONS ROUND: one fresh cluster, both phases; the figures go
# into RATE[PARTITIONS-ROUND-PHASE] and the printed line.
measure() {
	local parts="$1" round="$2" name="p$1-r$2" phase rate messages
	PHASE_FLAGS=("${DEFAULT_FLAGS[@]}" --partitions "$parts"
		--run-id "$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')" "${EXTRA_FLAGS[@]}")
	rm -rf -- "$CROWN_DIR"
	crown_cluster start >&2
	run_phases "$name" crown_bench "$CROWN_DIR"/node{1,2,3}.pid
	crown_cluster stop >&2
	for phase in produce consume; do
		[[ -s "$WORK/$name-$phase.json" ]] || die "the $phase-only run over $parts partitions wrote no report (see above)"
		rate="$(report_field "$WORK/$name-$phase.json" "$phase" msg_per_s)"
		messages="$(report_field "$WORK/$name-$phase.json" "$phase" messages)"
		RATE[$parts-$round-$phase]="$rate"
		# shellcheck disable=SC2059 # ROW is the format
		printf "$ROW" "$round" "$parts" "$phase" "$rate" \
			"$(per_message "${CPU[$name-$phase]}" "$messages")" "${STEAL[$name-$phase]}" | out
	done
}

main() {
	EXTRA_FLAGS=()
	while (($#)); do
		case "$1" in
		-h | --help | help)
			usage
			return 0
			;;
		--rounds | --many)
			[[ "${2:-}" =~ ^[1-9][0-9]*$ ]] || die "$1 needs a positive whole number"
			if [[ "$1" == --rounds ]]; then ROUNDS="$2"; else MANY="$2"; fi
			shift 2
			;;
		--partitions | --partitions=*)
			die "$1: the partitions are set per run (8, and --many)"
			;;
		*)
			EXTRA_FLAGS+=("$1")
			shift
			;;
		esac
	done

	log "building bin/crownd and bin/crownctl"
	make -C "$ROOT" --no-print-directory build >&2

	trap_crown_cleanup
	# Leftovers of an interrupted run: stop what we started, then start afresh.
	if [[ -d "$CROWN_DIR" ]]; then crown_cluster stop >&2; fi
	mkdir -p -- "$WORK"
	rm -f -- "$WORK"/p*-r*-produce.json "$WORK"/p*-r*-consume.json # no earlier run's report is read as this one's
	PHASES_RC=0
	declare -gA CPU=() STEAL=() RATE=()
	local load round parts phase
	local -a order
	load="$(cut -d' ' -f1-3 /proc/loadavg)"
	log "workload: ${DEFAULT_FLAGS[*]} ${EXTRA_FLAGS[*]}; 8 and $MANY partitions, $ROUNDS rounds"
	: >"$WORK/summary.txt"
	# shellcheck disable=SC2059 # ROW is the format
	printf "$ROW" round partitions phase msg/s "server CPU us/msg" "stolen s" | out
	for ((round = 1; round <= ROUNDS; round++)); do
		order=(8 "$MANY")
		((round % 2)) || order=("$MANY" 8)
		for parts in "${order[@]}"; do
			measure "$parts" "$round"
		done
		for phase in produce consume; do
			echo "round $round: $phase over $MANY partitions at" \
				"$(percent "${RATE[$MANY-$round-$phase]}" "${RATE[8-$round-$phase]}") of the rate over 8" | out
		done
	done
	echo "machine: $(nproc) cores, load average before the runs: $load" | out
	return "$PHASES_RC"
}

main "$@"
