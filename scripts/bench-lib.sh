# Shared by the benchmark scripts (bench-vs-nats.sh, bench-partitions.sh,
# bench-targets.sh, bench-ab.sh): sourced, not run. The including script
# defines log and die and ROOT, calls bench_settings (or, as bench-ab.sh,
# sets what it uses itself), and for run_phases and out defines the
# globals they name.

# bench_settings NAME HTTP RAFT: the globals of a script that runs one
# Crown cluster: its work directory (BENCH_DIR, default data/NAME), the
# first HTTP and Raft ports of its three nodes (BENCH_CROWN_HTTP_PORT and
# BENCH_CROWN_RAFT_PORT, defaults HTTP and RAFT) and how long to wait for
# it (BENCH_WAIT).
bench_settings() {
	BIN_DIR="$ROOT/bin"
	WORK="$(realpath -m -- "${BENCH_DIR:-$ROOT/data/$1}")"
	CROWN_DIR="$WORK/crown"
	HOST=127.0.0.1
	CROWN_HTTP="${BENCH_CROWN_HTTP_PORT:-$2}" # crownd HTTP ports
	CROWN_RAFT="${BENCH_CROWN_RAFT_PORT:-$3}" # crownd Raft ports
	WAIT="${BENCH_WAIT:-60}"
}

crown_urls() { echo "http://$HOST:$CROWN_HTTP,http://$HOST:$((CROWN_HTTP + 1)),http://$HOST:$((CROWN_HTTP + 2))"; }
crown_bench() { "$BIN_DIR/crownctl" --url "$(crown_urls)" bench run "$@" --json; }

# crown_cluster ARGS...: scripts/cluster.sh on the benchmark's own
# directory and ports.
crown_cluster() {
	CROWN_CLUSTER_DIR="$CROWN_DIR" CROWN_CLUSTER_HTTP_BASE="$CROWN_HTTP" \
		CROWN_CLUSTER_RAFT_BASE="$CROWN_RAFT" CROWN_CLUSTER_WAIT="$WAIT" \
		"$ROOT/scripts/cluster.sh" "$@"
}

# crown_cleanup_help: the end of the --help of a script that uses
# trap_crown_cleanup and crown_cluster.
crown_cleanup_help() {
	cat <<EOF
Only processes this script started are stopped (scripts/cluster.sh checks
each pid against /proc/<pid>/cmdline), also on an interrupt or an error.

Environment: BENCH_DIR (work directory), BENCH_CROWN_HTTP_PORT,
BENCH_CROWN_RAFT_PORT (first port of each range of three), BENCH_WAIT
(seconds to wait for a cluster, default 60).
EOF
}

# trap_crown_cleanup: for a script whose only cluster is crown_cluster's,
# stop it on exit, an interrupt or an error (only what it started:
# cluster.sh checks every pid), keeping the script's exit status.
trap_crown_cleanup() {
	trap crown_cleanup EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
}

crown_cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	if [[ -d "$CROWN_DIR" ]]; then
		crown_cluster stop >&2 || true
	fi
	exit "$rc"
}

# out: standard input to standard output and $WORK/summary.txt. The runs
# themselves stay in the script's shell (not in a pipeline's subshell), so
# that an interrupt reaches its trap and the cleanup.
out() { tee -a -- "$WORK/summary.txt"; }

# cpu_ticks PIDFILE...: user+system CPU clock ticks of the processes named
# by the pid files (fields 14 and 15 of /proc/PID/stat, after the command
# name, which may hold spaces).
cpu_ticks() {
	local f pid stat total=0
	local -a fields
	for f in "$@"; do
		pid="$(cat -- "$f" 2>/dev/null || true)"
		[[ "$pid" =~ ^[0-9]+$ ]] || continue
		stat="$(cat "/proc/$pid/stat" 2>/dev/null || true)"
		[[ -n "$stat" ]] || continue
		read -r -a fields <<<"${stat##*) }"
		total=$((total + fields[11] + fields[12]))
	done
	echo "$total"
}

# steal_ticks: clock ticks the hypervisor has given this machine's CPUs to
# other guests since boot (the steal column of /proc/stat; 0 where absent).
# A run during which it grows ran on less than the machine, and on the
# 2-vCPU hosts we measure on it has taken more than half of a run: such a
# run's rates say nothing about either broker, so every report shows it.
steal_ticks() {
	awk '$1 == "cpu" { print ($9 == "" ? 0 : $9); exit }' /proc/stat 2>/dev/null || echo 0
}

# cpu_seconds TICKS
cpu_seconds() {
	awk -v t="$1" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f", t / hz }'
}

# report_field FILE SECTION KEY: the value of "KEY" in the top-level object
# "SECTION" of a report written by --json (indented by two spaces, one key
# a line), without quotes; empty when absent.
report_field() {
	awk -v sec="  \"$2\": {" -v key="    \"$3\": " '
		$0 == sec { in_sec = 1; next }
		in_sec && /^  }/ { exit }
		in_sec && index($0, key) == 1 {
			v = substr($0, length(key) + 1)
			sub(/,$/, "", v)
			gsub(/"/, "", v)
			print v
			exit
		}' "$1"
}

# ratio A B: A/B with two decimals, "-" when B is 0.
ratio() {
	awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'
}

# run_phases BROKER BENCH PIDFILE...: against BROKER's running cluster, a
# produce-only run, then a consume-only run of the messages it stored (same
# run id; the produce run's count when it confirmed all of it, else an
# inferred one). BENCH is a function running the broker's driver with the
# flags it is given (PHASE_FLAGS first). Writes $WORK/BROKER-produce.json and
# $WORK/BROKER-consume.json, the servers' CPU seconds of each phase in
# CPU[BROKER-produce] and CPU[BROKER-consume]; a failed run sets PHASES_RC=1.
run_phases() {
	local broker="$1" bench="$2"
	shift 2
	local produce="$WORK/$broker-produce.json" consume="$WORK/$broker-consume.json"
	local c0 c1 s0 s1 run_id count confirmed
	log "produce-only phase against $broker"
	c0="$(cpu_ticks "$@")"
	s0="$(steal_ticks)"
	"$bench" "${PHASE_FLAGS[@]}" --mode produce >"$produce" || PHASES_RC=1
	c1="$(cpu_ticks "$@")"
	s1="$(steal_ticks)"
	CPU[$broker-produce]="$(cpu_seconds $((c1 - c0)))"
	STEAL[$broker-produce]="$(cpu_seconds $((s1 - s0)))"
	if [[ ! -s "$produce" ]]; then
		log "the produce-only run against $broker wrote no report: no consume-only run"
		PHASES_RC=1
		return 0
	fi
	run_id="$(report_field "$produce" workload run_id)"
	count="$(report_field "$produce" workload count)"
	confirmed="$(report_field "$produce" produce messages)"
	[[ "$run_id" =~ ^[A-Za-z0-9]+$ && "$count" =~ ^[0-9]+$ ]] ||
		die "$produce: no workload run_id and count (run_id '$run_id', count '$count')"
	[[ "$confirmed" =~ ^[0-9]+$ ]] || confirmed=0
	if ((count == 0 || confirmed != count)); then
		if ((count == 0)); then
			log "the produce-only run against $broker had no --count (it confirmed $confirmed messages):"
		else
			log "the produce-only run against $broker confirmed $confirmed of its $count messages:"
		fi
		log "  the consume-only run infers the expected count per producer (losses at the end of a producer's sequence go unseen)"
		count=0
	fi
	log "consume-only phase against $broker (run $run_id, count $count)"
	"$bench" "${PHASE_FLAGS[@]}" --mode consume --run-id "$run_id" --count "$count" >"$consume" || PHASES_RC=1
	CPU[$broker-consume]="$(cpu_seconds $(($(cpu_ticks "$@") - c1)))"
	STEAL[$broker-consume]="$(cpu_seconds $(($(steal_ticks) - s1)))"
	[[ -s "$consume" ]] || PHASES_RC=1
	return 0
}
