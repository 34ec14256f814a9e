#!/usr/bin/env bash
# Writes cmd/crownd/default.pgo, the CPU profile `go build` optimises crownd
# with (profile-guided optimisation: Go builds a main package with the
# default.pgo beside it). The profile is the README's workload as the
# benchmarks run it: a fresh three-node cluster over 8 partitions and one over
# 10,000, a produce-only run then a consume-only run of its messages, every
# node profiled during each, all merged into one. See --help.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN_DIR="$ROOT/bin"
WORK="$(realpath -m -- "${PGO_DIR:-$ROOT/data/pgo-profile}")"
CROWN_DIR="$WORK/crown"
HOST=127.0.0.1
CROWN_HTTP="${PGO_CROWN_HTTP_PORT:-16700}" # crownd HTTP ports
CROWN_RAFT="${PGO_CROWN_RAFT_PORT:-17700}" # crownd Raft ports
WAIT="${PGO_WAIT:-60}"
# shellcheck source=scripts/bench-lib.sh
source "$ROOT/scripts/bench-lib.sh"

OUT="$ROOT/cmd/crownd/default.pgo"
SECONDS_EACH=6
# The README's workload. A phase must outlast the profile: 600,000 messages
# take 8–30 s on the 2-core hosts we measure on.
FLAGS=(--count 600000 --payload-size 256 --push-batch 100 --pop-batch 100
	--producers 8 --consumers 8 --queues 1 --groups 1 --pop-partitions 4)

log() { echo "pgo-profile: $*" >&2; }
die() {
	log "$*"
	exit 1
}

usage() {
	cat <<EOF
Usage: scripts/pgo-profile.sh [--seconds N] [--out FILE]

Profiles crownd under the README's workload and writes the merged CPU profile
that \`go build\` uses for profile-guided optimisation. Over 8 partitions and
over 10,000, each on a fresh three-node cluster (started with --pprof, on
ports $CROWN_HTTP-$((CROWN_HTTP + 2)) and $CROWN_RAFT-$((CROWN_RAFT + 2))), it runs a produce-only
bench then a consume-only one of the same messages and takes a CPU profile of
every node during each, starting two seconds into the phase. The twelve
profiles are merged with \`go tool pprof -proto\`.

Refresh the profile after a change that moves the hot paths (the lesson on
profile-guided optimisation in docs/performance.md says what it bought);
a stale profile is safe, only less useful: Go matches it to the code by
function names and offsets within them, and ignores what no longer matches.

  --seconds N   seconds each profile covers (default $SECONDS_EACH)
  --out FILE    where to write the merged profile (default cmd/crownd/default.pgo)

Environment: PGO_DIR (work directory, default ./data/pgo-profile),
PGO_CROWN_HTTP_PORT, PGO_CROWN_RAFT_PORT, PGO_WAIT (seconds to wait for the
cluster, default 60).
EOF
}

cleanup() {
	local rc=$?
	if [[ -d "$CROWN_DIR" ]]; then crown_cluster stop >&2 || true; fi
	exit "$rc"
}

# profile_phase NAME MODE PARTITIONS RUNID: one bench phase, with a CPU
# profile of every node taken while it runs.
profile_phase() {
	local name="$1" mode="$2" parts="$3" run_id="$4" bench_pid i rc=0
	local -a curls=()
	log "$name: $mode-only over $parts partitions, profiling every node for ${SECONDS_EACH}s"
	crown_bench "${FLAGS[@]}" --partitions "$parts" --run-id "$run_id" --mode "$mode" >"$WORK/$name.json" &
	bench_pid=$!
	sleep 2
	for i in 0 1 2; do
		curl -fsS -o "$WORK/$name-node$((i + 1)).pprof" \
			"http://$HOST:$((CROWN_HTTP + i))/debug/pprof/profile?seconds=$SECONDS_EACH" &
		curls+=($!)
	done
	for i in "${curls[@]}"; do wait "$i" || rc=1; done
	wait "$bench_pid" || die "$name: the $mode-only bench failed (report: $WORK/$name.json)"
	((rc == 0)) || die "$name: a profile could not be taken"
	local elapsed
	elapsed="$(report_field "$WORK/$name.json" "$mode" seconds)"
	log "$name: $(report_field "$WORK/$name.json" "$mode" msg_per_s) msg/s over ${elapsed:-?}s"
}

main() {
	while (($#)); do
		case "$1" in
		-h | --help | help)
			usage
			return 0
			;;
		--seconds)
			[[ "${2:-}" =~ ^[1-9][0-9]*$ ]] || die "--seconds needs a positive whole number"
			SECONDS_EACH="$2"
			shift 2
			;;
		--out)
			[[ -n "${2:-}" ]] || die "--out needs a file name"
			OUT="$(realpath -m -- "$2")"
			shift 2
			;;
		*)
			usage >&2
			die "unknown argument: $1"
			;;
		esac
	done
	command -v curl >/dev/null || die "curl is needed"

	log "building bin/crownd and bin/crownctl"
	make -C "$ROOT" --no-print-directory build >&2

	trap cleanup EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	if [[ -d "$CROWN_DIR" ]]; then crown_cluster stop >&2; fi
	mkdir -p -- "$WORK"
	rm -f -- "$WORK"/*.pprof "$WORK"/*.json
	local parts run_id
	for parts in 8 10000; do
		rm -rf -- "$CROWN_DIR"
		CROWN_PPROF=true crown_cluster start >&2
		run_id="$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')"
		profile_phase "p$parts-produce" produce "$parts" "$run_id"
		profile_phase "p$parts-consume" consume "$parts" "$run_id"
		crown_cluster stop >&2
	done
	go -C "$ROOT" tool pprof -proto "$WORK"/*.pprof >"$OUT.tmp"
	mv -- "$OUT.tmp" "$OUT"
	log "wrote $OUT ($(wc -c <"$OUT") bytes); rebuild (make build) to use it"
}

main "$@"
