#!/usr/bin/env bash
# Compare two builds of crownd by paired runs: two three-node clusters stand
# side by side, one per build, and short produce-only then consume-only runs
# alternate between them, so that whatever the host does to its speed meanwhile
# falls on both builds alike. Prints each pair and the geometric mean of the
# B/A ratios with a 95 % interval. See --help.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="$(realpath -m -- "${BENCH_DIR:-$ROOT/data/bench-ab}")"
HOST=127.0.0.1
HTTP_BASE="${BENCH_CROWN_HTTP_PORT:-16710}" # cluster A's HTTP ports; B's are 10 above
RAFT_BASE="${BENCH_CROWN_RAFT_PORT:-17710}" # cluster A's Raft ports; B's are 10 above
WAIT="${BENCH_WAIT:-60}"
# shellcheck source=scripts/bench-lib.sh
source "$ROOT/scripts/bench-lib.sh"

PAIRS=12
PARTITIONS=8
# The README's workload but shorter runs: the pairs' count, not a run's
# length, is what narrows the interval. Arguments given to the script are
# appended (a flag given twice: the last one wins).
DEFAULT_FLAGS=(--count 150000 --payload-size 256 --push-batch 100 --pop-batch 100
	--producers 8 --consumers 8 --queues 1 --groups 1 --pop-partitions 4)

log() { echo "bench-ab: $*" >&2; }
die() {
	log "$*"
	exit 1
}

usage() {
	cat <<EOF
Usage: scripts/bench-ab.sh [--pairs N] [--partitions N] A_BIN_DIR B_BIN_DIR [BENCH FLAGS...]

Measures build B against build A. A_BIN_DIR and B_BIN_DIR each hold a crownd
(for example bin/ of two checkouts after make build); the load generator is
this checkout's bin/crownctl for both, built if missing. Starts one fresh
three-node cluster of each build (A on ports $HTTP_BASE-$((HTTP_BASE + 2)), B ten above),
then runs N pairs: in each, against each cluster in turn (A first in odd
pairs, B first in even ones), a produce-only run and a consume-only run of
the messages it stored (the same queue every time: the load generator names
it by --prefix, and its group consumes each run's messages). A report line a run:
pair, build, produce msg/s, servers' CPU us a produced message, consume
msg/s, servers' CPU us a consumed message. Then, for each figure, the
geometric mean of B/A over the pairs with a 95 % interval (normal
approximation of the log ratios' mean), and in how many pairs B was higher.

The hosts we measure on change speed by a fifth within minutes; two builds
measured one after the other take those changes for differences. Paired on
standing clusters, a pair's two runs lie seconds apart; the interval says
what the host's noise leaves undecided. The clusters are not fresh for each
pair: state accumulates alike in both (each pair stores --count messages).

  --pairs N       pairs to run (default $PAIRS)
  --partitions N  partitions of each run's queue (default $PARTITIONS)

Default workload: ${DEFAULT_FLAGS[*]}
Any flag of 'crownctl bench run' overrides it. Reports and the summary go to
$WORK (BENCH_DIR). Environment: BENCH_CROWN_HTTP_PORT, BENCH_CROWN_RAFT_PORT,
BENCH_WAIT (seconds to wait for a cluster, default $WAIT).
EOF
}

# cluster NAME ARGS...: scripts/cluster.sh on build NAME's cluster.
cluster() {
	local name="$1" off=0
	shift
	[[ "$name" == B ]] && off=10
	CROWN_BIN_DIR="${BIN[$name]}" CROWN_CLUSTER_DIR="$WORK/$name" \
		CROWN_CLUSTER_HTTP_BASE=$((HTTP_BASE + off)) CROWN_CLUSTER_RAFT_BASE=$((RAFT_BASE + off)) \
		CROWN_CLUSTER_WAIT="$WAIT" "$ROOT/scripts/cluster.sh" "$@"
}

urls() {
	local base=$HTTP_BASE
	[[ "$1" == B ]] && base=$((HTTP_BASE + 10))
	echo "http://$HOST:$base,http://$HOST:$((base + 1)),http://$HOST:$((base + 2))"
}

cleanup() {
	local rc=$? name
	trap - EXIT INT TERM
	for name in A B; do
		if [[ -d "$WORK/$name" ]]; then cluster "$name" stop >&2 || true; fi
	done
	exit "$rc"
}

# run PAIR NAME: one produce-only and one consume-only run against NAME's
# cluster; appends the report line to rows.txt.
run() {
	local pair="$1" name="$2" id c0 c1 c2 produced consumed
	local -a pids=("$WORK/$name"/node{1,2,3}.pid) flags
	id="p${pair}$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')"
	flags=("${DEFAULT_FLAGS[@]}" --partitions "$PARTITIONS" "${EXTRA_FLAGS[@]}" --run-id "$id")
	c0="$(cpu_ticks "${pids[@]}")"
	"$ROOT/bin/crownctl" --url "$(urls "$name")" bench run "${flags[@]}" --mode produce --json \
		>"$WORK/$pair-$name-produce.json" 2>"$WORK/$pair-$name-produce.log" ||
		die "pair $pair, build $name: the produce-only run failed ($WORK/$pair-$name-produce.log)"
	c1="$(cpu_ticks "${pids[@]}")"
	produced="$(report_field "$WORK/$pair-$name-produce.json" produce messages)"
	"$ROOT/bin/crownctl" --url "$(urls "$name")" bench run "${flags[@]}" --mode consume \
		--count "$produced" --json >"$WORK/$pair-$name-consume.json" 2>"$WORK/$pair-$name-consume.log" ||
		die "pair $pair, build $name: the consume-only run failed or did not get every message exactly once ($WORK/$pair-$name-consume.log)"
	c2="$(cpu_ticks "${pids[@]}")"
	consumed="$(report_field "$WORK/$pair-$name-consume.json" consume messages)"
	awk -v p="$pair" -v n="$name" -v hz="$(getconf CLK_TCK)" \
		-v pr="$(report_field "$WORK/$pair-$name-produce.json" produce msg_per_s)" \
		-v cr="$(report_field "$WORK/$pair-$name-consume.json" consume msg_per_s)" \
		-v pt=$((c1 - c0)) -v ct=$((c2 - c1)) -v pm="$produced" -v cm="$consumed" \
		'BEGIN { printf "%4d %5s %12d %14.1f %12d %14.1f\n", p, n, pr, pt * 1e6 / hz / pm, cr, ct * 1e6 / hz / cm }' |
		tee -a -- "$WORK/rows.txt"
}

# summarise: per figure, the geometric mean of B/A over the pairs, its 95 %
# interval and the pairs in which B was higher.
summarise() {
	awk '
		{ v[$1, $2, 3] = $3; v[$1, $2, 4] = $4; v[$1, $2, 5] = $5; v[$1, $2, 6] = $6; pairs[$1] = 1 }
		END {
			name[3] = "produce msg/s"; name[4] = "produce server CPU us/msg"
			name[5] = "consume msg/s"; name[6] = "consume server CPU us/msg"
			for (f = 3; f <= 6; f++) {
				n = 0; s = 0; ss = 0; up = 0
				for (p in pairs) {
					if (v[p, "A", f] <= 0 || v[p, "B", f] <= 0) continue
					r = log(v[p, "B", f] / v[p, "A", f])
					n++; s += r; ss += r * r; if (r > 0) up++
				}
				if (n < 2) { printf "%-27s fewer than two pairs\n", name[f]; continue }
				m = s / n; sd = sqrt((ss - n * m * m) / (n - 1)); h = 1.96 * sd / sqrt(n)
				printf "%-27s B/A %.3f (95 %% interval %.3f-%.3f), B higher in %d of %d pairs\n",
					name[f], exp(m), exp(m - h), exp(m + h), up, n
			}
		}' "$WORK/rows.txt"
}

main() {
	local -a dirs=()
	EXTRA_FLAGS=()
	while (($#)); do
		case "$1" in
		-h | --help | help)
			usage
			return 0
			;;
		--pairs | --partitions)
			[[ "${2:-}" =~ ^[1-9][0-9]*$ ]] || die "$1 needs a positive whole number"
			if [[ "$1" == --pairs ]]; then PAIRS="$2"; else PARTITIONS="$2"; fi
			shift 2
			;;
		--mode | --mode=* | --run-id | --run-id=*)
			die "$1: the script runs each build produce-only, then consume-only, with a run id of its own"
			;;
		*)
			if ((${#dirs[@]} < 2)); then dirs+=("$1"); else EXTRA_FLAGS+=("$1"); fi
			shift
			;;
		esac
	done
	((${#dirs[@]} == 2)) || {
		usage >&2
		die "two build directories are needed"
	}
	declare -gA BIN=([A]="$(realpath -- "${dirs[0]}")" [B]="$(realpath -- "${dirs[1]}")")
	local name
	for name in A B; do
		[[ -x "${BIN[$name]}/crownd" ]] || die "${BIN[$name]}/crownd not found (run make build in its checkout)"
	done
	if [[ ! -x "$ROOT/bin/crownctl" ]]; then
		log "building bin/crownctl"
		make -C "$ROOT" --no-print-directory build >&2
	fi

	trap cleanup EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	mkdir -p -- "$WORK"
	for name in A B; do
		if [[ -d "$WORK/$name" ]]; then cluster "$name" stop >&2; fi
		rm -rf -- "${WORK:?}/$name"
	done
	rm -f -- "$WORK"/*.json "$WORK"/*.log
	for name in A B; do cluster "$name" start >&2; done
	log "A: ${BIN[A]}/crownd, B: ${BIN[B]}/crownd; $PAIRS pairs over $PARTITIONS partitions: ${DEFAULT_FLAGS[*]} ${EXTRA_FLAGS[*]}"
	printf '%4s %5s %12s %14s %12s %14s\n' pair build "produce msg/s" "CPU us/msg" "consume msg/s" "CPU us/msg"
	: >"$WORK/rows.txt"
	local pair
	for ((pair = 1; pair <= PAIRS; pair++)); do
		if ((pair % 2)); then
			run "$pair" A
			run "$pair" B
		else
			run "$pair" B
			run "$pair" A
		fi
	done
	summarise | tee -- "$WORK/summary.txt"
}

main "$@"
