#!/usr/bin/env bash
# Benchmark a three-node Crown cluster against a three-node NATS JetStream
# cluster on this machine, with the same workload, and print one table with
# both results and the Crown/JetStream ratio of each figure (with --phases,
# one table for a produce-only and one for a consume-only run). See --help.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
GO="${GO:-go}"
# shellcheck source=scripts/bench-lib.sh
source "$ROOT/scripts/bench-lib.sh"
bench_settings bench-vs-nats 16640 17640
NATS_DIR="$WORK/nats"
NATS_PORT="${BENCH_NATS_PORT:-14222}"        # client ports NATS_PORT..+2
NATS_ROUTE="${BENCH_NATS_ROUTE_PORT:-16222}" # cluster route ports
NATS_HTTP="${BENCH_NATS_HTTP_PORT:-18222}"   # monitoring ports (/healthz)
# The default workload; arguments given to the script are appended (a flag
# given twice: the last one wins).
DEFAULT_FLAGS=(--count 500000 --payload-size 256 --push-batch 100 --pop-batch 100
	--producers 8 --consumers 8 --partitions 8 --queues 1 --groups 1)
PHASES=0 # --phases: a produce-only run, then a consume-only run of its messages

usage() {
	cat <<EOF
Usage: scripts/bench-vs-nats.sh [--phases] [BENCH FLAGS...]

Runs one workload against two local three-node clusters in turn, each alone
on the machine: NATS JetStream (nats-server, R3 file-storage streams, durable
pull consumers with explicit acks; driver: cmd/internal/natsbench), then
Crown (crownd via scripts/cluster.sh; driver: crownctl bench run). Then it
prints both results side by side with the Crown/JetStream ratio of each
figure (crownctl bench compare), also saved in $WORK/compare.txt, and under
it the servers' CPU seconds during each run and the CPU time the hypervisor
stole from the machine meanwhile (/proc/stat): a run with steal ran on less
than the machine, and its rates compare with nothing.

Default workload: ${DEFAULT_FLAGS[*]}
Any flag of 'crownctl bench run' (both drivers accept the same workload
flags) overrides it, for example:
  scripts/bench-vs-nats.sh --count 100000
  scripts/bench-vs-nats.sh --duration 30s --count 0

--phases: instead of producing and consuming at once, run for each broker,
with its cluster started once, a produce-only run (--mode produce) and then
a consume-only run (--mode consume, same --run-id) that drains the messages
the produce run stored and checks them exactly once (lost and duplicates are
counted there, against the produce run's count; when the produce run did not
confirm its whole --count, e.g. with --duration, the consume run infers the
expected count from the highest sequence number of each producer and cannot
see losses at the end of a sequence). Prints one table per phase, also saved
in $WORK/compare-phases.txt; reports in
$WORK/{jetstream,crown}-{produce,consume}.json. The script sets --mode (and
a --run-id shared by the four runs, unless one is given).

Steps: builds bin/crownd, bin/crownctl and bin/natsbench; installs
nats-server from Debian's packages when it is missing (apt-get install -y
nats-server, as root or through sudo); deletes and recreates $NATS_DIR
and $CROWN_DIR (earlier reports in $WORK stay until overwritten);
starts the NATS cluster (client ports $NATS_PORT-$((NATS_PORT + 2))), runs the
bench (both phases with --phases), stops it; starts the Crown cluster (HTTP
$CROWN_HTTP-$((CROWN_HTTP + 2)), Raft $CROWN_RAFT-$((CROWN_RAFT + 2))), runs the bench, stops it. Reports
are kept in $WORK/{jetstream,crown}.json, logs under $WORK. Under
each table: the CPU seconds (user+system) the three servers used during
that run.

Only processes this script started are stopped: pid files, checked against
/proc/<pid>/cmdline, also on an interrupt or an error.

Environment: BENCH_DIR (work directory), BENCH_NATS_PORT, BENCH_NATS_ROUTE_PORT,
BENCH_NATS_HTTP_PORT, BENCH_CROWN_HTTP_PORT, BENCH_CROWN_RAFT_PORT (first
port of each range of three), BENCH_WAIT (seconds to wait for a cluster,
default 60), GO (go command).
EOF
}

log() { echo "bench-vs-nats: $*" >&2; }
die() {
	log "$*"
	exit 1
}

nats_conf() { echo "$NATS_DIR/n$1.conf"; }
nats_pid_file() { echo "$NATS_DIR/n$1.pid"; }
nats_log() { echo "$NATS_DIR/n$1.log"; }
nats_urls() { echo "nats://$HOST:$NATS_PORT,nats://$HOST:$((NATS_PORT + 1)),nats://$HOST:$((NATS_PORT + 2))"; }

find_nats_server() {
	if command -v nats-server >/dev/null 2>&1; then
		command -v nats-server
	elif [[ -x /usr/sbin/nats-server ]]; then # Debian's path, not always on PATH
		echo /usr/sbin/nats-server
	else
		return 1
	fi
}

install_nats_server() {
	local sudo=()
	if ((EUID != 0)); then
		command -v sudo >/dev/null 2>&1 || die "nats-server is missing and neither root nor sudo is available: install Debian's nats-server package"
		sudo=(sudo)
	fi
	log "nats-server not found: installing Debian's nats-server package"
	if ! "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y nats-server >&2; then
		"${sudo[@]}" apt-get update >&2
		"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y nats-server >&2
	fi
}

# nats_is_ours PID I: the process is a nats-server run with node I's config.
nats_is_ours() {
	local pid="$1" want
	want="$(nats_conf "$2")"
	[[ "$pid" =~ ^[0-9]+$ && -r "/proc/$pid/cmdline" ]] || return 1
	local -a argv=()
	mapfile -d '' -t argv <"/proc/$pid/cmdline" 2>/dev/null || return 1
	((${#argv[@]} > 2)) || return 1
	[[ "$(basename -- "${argv[0]}")" == nats-server ]] || return 1
	local j
	for ((j = 1; j < ${#argv[@]} - 1; j++)); do
		[[ "${argv[$j]}" == -c && "${argv[$((j + 1))]}" == "$want" ]] && return 0
	done
	return 1
}

start_nats() {
	local i conf store
	mkdir -p -- "$NATS_DIR"
	for i in 1 2 3; do
		conf="$(nats_conf "$i")"
		store="$NATS_DIR/n$i"
		mkdir -p -- "$store"
		cat >"$conf" <<EOF
server_name: n$i
listen: $HOST:$((NATS_PORT + i - 1))
http: $HOST:$((NATS_HTTP + i - 1))
jetstream {
  store_dir: "$store"
  max_memory_store: 268435456
  max_file_store: 21474836480
}
cluster {
  name: crown-bench
  listen: $HOST:$((NATS_ROUTE + i - 1))
  routes: [
    nats-route://$HOST:$NATS_ROUTE
    nats-route://$HOST:$((NATS_ROUTE + 1))
    nats-route://$HOST:$((NATS_ROUTE + 2))
  ]
}
EOF
		# shellcheck disable=SC2016 # $$ and $@ are the inner shell's
		setsid bash -c 'echo $$ >"$1"; shift; exec "$@"' _ "$(nats_pid_file "$i")" \
			"$NATS_SERVER" -c "$conf" </dev/null >>"$(nats_log "$i")" 2>&1 &
	done
	local n pid ok deadline=$((SECONDS + WAIT))
	for i in 1 2 3; do
		for ((n = 0; n < 50; n++)); do
			pid="$(cat -- "$(nats_pid_file "$i")" 2>/dev/null || true)"
			nats_is_ours "$pid" "$i" && break
			sleep 0.1
		done
		nats_is_ours "$pid" "$i" || {
			tail -n 20 -- "$(nats_log "$i")" >&2 || true
			die "nats-server n$i did not start (log above)"
		}
	done
	# Healthy: every node answers /healthz (JetStream current) with 200.
	while :; do
		ok=0
		for i in 1 2 3; do
			curl -fsS -o /dev/null --max-time 2 "http://$HOST:$((NATS_HTTP + i - 1))/healthz" 2>/dev/null && ok=$((ok + 1))
		done
		((ok == 3)) && break
		((SECONDS < deadline)) || die "the NATS cluster is not healthy after ${WAIT}s (see $NATS_DIR/n*.log)"
		sleep 0.5
	done
	log "NATS JetStream cluster up: $(nats_urls) ($("$NATS_SERVER" --version 2>&1 | head -n 1))"
}

stop_nats() {
	local i pid n
	for i in 1 2 3; do
		[[ -f "$(nats_pid_file "$i")" ]] || continue
		pid="$(<"$(nats_pid_file "$i")")"
		if nats_is_ours "$pid" "$i"; then
			kill -TERM "$pid" 2>/dev/null || true
			for ((n = 0; n < 300; n++)); do
				nats_is_ours "$pid" "$i" || break
				sleep 0.1
			done
			if nats_is_ours "$pid" "$i"; then
				log "nats-server n$i (pid $pid) still running after 30 s; SIGKILL"
				kill -KILL "$pid" 2>/dev/null || true
			fi
			log "nats-server n$i stopped (pid $pid)"
		fi
		rm -f -- "$(nats_pid_file "$i")"
	done
}

nats_bench() { "$BIN_DIR/natsbench" --url "$(nats_urls)" "$@" --json; }

# main_phases FLAGS...: --phases, with the clusters cleaned up by main.
main_phases() {
	local run_id
	run_id="$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')"
	# The run id goes before the given flags, so that a --run-id given wins.
	PHASE_FLAGS=("${DEFAULT_FLAGS[@]}" --run-id "$run_id" "$@")
	PHASES_RC=0
	declare -gA CPU=() STEAL=()
	local f broker phase
	for f in {jetstream,crown}-{produce,consume}.json compare-phases.txt; do
		rm -f -- "${WORK:?}/$f"
	done
	LOAD_BEFORE="$(cut -d' ' -f1-3 /proc/loadavg)"
	log "workload (phases: produce, then consume): ${PHASE_FLAGS[*]}"

	start_nats
	run_phases jetstream nats_bench "$NATS_DIR"/n{1,2,3}.pid
	stop_nats

	crown_cluster start >&2
	run_phases crown crown_bench "$CROWN_DIR"/node{1,2,3}.pid
	crown_cluster stop >&2

	for broker in jetstream crown; do
		for phase in produce consume; do
			[[ -s "$WORK/$broker-$phase.json" ]] || die "the $phase-only run against $broker wrote no report (see above)"
		done
	done
	echo
	{
		for phase in produce consume; do
			echo "=== $phase-only phase ==="
			"$BIN_DIR/crownctl" bench compare "$WORK/crown-$phase.json" "$WORK/jetstream-$phase.json"
			echo "server CPU during the $phase-only run (3 nodes, user+system): crown ${CPU[crown-$phase]} s," \
				"jetstream ${CPU[jetstream-$phase]} s (crown/jetstream $(ratio "${CPU[crown-$phase]}" "${CPU[jetstream-$phase]}"))"
			echo "CPU time stolen by the hypervisor during the $phase-only run (all cores): crown ${STEAL[crown-$phase]} s," \
				"jetstream ${STEAL[jetstream-$phase]} s"
			echo
		done
		echo "machine: $(nproc) cores, load average before the runs: $LOAD_BEFORE"
	} | tee "$WORK/compare-phases.txt"
	return "$PHASES_RC"
}

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	stop_nats || true
	if [[ -d "$CROWN_DIR" ]]; then
		crown_cluster stop >&2 || true
	fi
	exit "$rc"
}

main() {
	local -a args=()
	local a
	for a in "$@"; do
		if [[ "$a" == --phases ]]; then PHASES=1; else args+=("$a"); fi
	done
	set -- "${args[@]}"
	case "${1:-}" in
	-h | --help | help)
		usage
		return 0
		;;
	esac
	local flags=("${DEFAULT_FLAGS[@]}" "$@")

	log "building bin/crownd, bin/crownctl and bin/natsbench"
	make -C "$ROOT" --no-print-directory build >&2
	(cd "$ROOT" && CGO_ENABLED=0 "$GO" build -trimpath -o "$BIN_DIR/natsbench" ./cmd/internal/natsbench)

	NATS_SERVER="$(find_nats_server)" || {
		install_nats_server
		NATS_SERVER="$(find_nats_server)" || die "nats-server is still missing after apt-get install"
	}

	trap cleanup EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	# Leftovers of an interrupted run: stop what we started, then start afresh.
	stop_nats
	if [[ -d "$CROWN_DIR" ]]; then crown_cluster stop >&2; fi
	rm -rf -- "$NATS_DIR" "$CROWN_DIR"
	mkdir -p -- "$WORK"
	if ((PHASES)); then
		main_phases "$@"
		return
	fi

	local rc=0
	LOAD_BEFORE="$(cut -d' ' -f1-3 /proc/loadavg)"
	log "workload: ${flags[*]}"
	local c0 s0 nats_cpu crown_cpu nats_steal crown_steal
	local -a nats_pids=("$NATS_DIR"/n{1,2,3}.pid) crown_pids=("$CROWN_DIR"/node{1,2,3}.pid)
	start_nats
	log "running the workload against JetStream"
	c0="$(cpu_ticks "${nats_pids[@]}")"
	s0="$(steal_ticks)"
	"$BIN_DIR/natsbench" --url "$(nats_urls)" "${flags[@]}" --json >"$WORK/jetstream.json" || rc=1
	nats_cpu="$(cpu_seconds $(($(cpu_ticks "${nats_pids[@]}") - c0)))"
	nats_steal="$(cpu_seconds $(($(steal_ticks) - s0)))"
	stop_nats

	crown_cluster start >&2
	log "running the workload against Crown"
	c0="$(cpu_ticks "${crown_pids[@]}")"
	s0="$(steal_ticks)"
	"$BIN_DIR/crownctl" --url "$(crown_urls)" bench run "${flags[@]}" --json >"$WORK/crown.json" || rc=1
	crown_cpu="$(cpu_seconds $(($(cpu_ticks "${crown_pids[@]}") - c0)))"
	crown_steal="$(cpu_seconds $(($(steal_ticks) - s0)))"
	crown_cluster stop >&2

	[[ -s "$WORK/jetstream.json" && -s "$WORK/crown.json" ]] || die "a run wrote no report (see above)"
	echo
	{
		"$BIN_DIR/crownctl" bench compare "$WORK/crown.json" "$WORK/jetstream.json"
		echo "server CPU during the run (3 nodes, user+system): crown ${crown_cpu} s, jetstream ${nats_cpu} s" \
			"(crown/jetstream $(awk -v a="$crown_cpu" -v b="$nats_cpu" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'))"
		echo "CPU time stolen by the hypervisor during the run (all cores): crown ${crown_steal} s, jetstream ${nats_steal} s"
		echo "machine: $(nproc) cores, load average before the run: $LOAD_BEFORE"
	} | tee "$WORK/compare.txt"
	return "$rc"
}

main "$@"
