#!/usr/bin/env bash
# Run a three-node Crown cluster on this machine: node1..node3, HTTP on
# 127.0.0.1:6632-6634, Raft on 127.0.0.1:7632-7634, data and logs under
# ./data/cluster/. See --help and docs/deployments.md.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN_DIR="${CROWN_BIN_DIR:-$ROOT/bin}"
CROWND="$BIN_DIR/crownd"
CROWNCTL="$BIN_DIR/crownctl"
CLUSTER_DIR="$(realpath -m -- "${CROWN_CLUSTER_DIR:-$ROOT/data/cluster}")"
HTTP_BASE="${CROWN_CLUSTER_HTTP_BASE:-6632}"
RAFT_BASE="${CROWN_CLUSTER_RAFT_BASE:-7632}"
HOST=127.0.0.1
WAIT="${CROWN_CLUSTER_WAIT:-30}"
WRITE_BPS="${CROWN_CLUSTER_WRITE_BPS:-}"
NODES=(node1 node2 node3)

usage() {
	cat <<EOF
Usage: scripts/cluster.sh COMMAND [NODE]

Runs a three-node Crown cluster of local crownd processes.

Commands:
  start [NODE]    start every node (or one) that is not running, then wait until healthy
  stop [NODE]     stop every node (or one) with SIGTERM (SIGKILL after 40 s)
  status          show each node's process and the cluster's view of itself
  kill NODE       SIGKILL one node (simulates a crash)
  restart NODE    stop one node if it runs, start it again and wait until healthy
  clean           stop every node and delete $CLUSTER_DIR
  -h, --help      show this help

NODE is node1, node2 or node3 (or 1, 2, 3).

EOF
	local i
	printf '  %-6s %-23s %-16s %s\n' Node HTTP Raft "Data dir, log, pid file"
	for i in 0 1 2; do
		printf '  %-6s %-23s %-16s %s\n' "${NODES[$i]}" "$(http_url "$i")" "$(raft_addr "$i")" \
			"${CLUSTER_DIR#"$ROOT"/}/${NODES[$i]}{,.log,.pid}"
	done
	cat <<EOF

Only processes this script started are signalled: each node's pid is kept in
its pid file and checked against /proc/<pid>/cmdline (a crownd run with this
node's --data-dir) before any signal is sent.

Environment:
  CROWN_BIN_DIR            where crownd and crownctl are (default ./bin; run make build)
  CROWN_CLUSTER_DIR        data directory (default ./data/cluster)
  CROWN_CLUSTER_HTTP_BASE  first HTTP port (default 6632)
  CROWN_CLUSTER_RAFT_BASE  first Raft port (default 7632)
  CROWN_CLUSTER_WAIT       seconds to wait for health on start (default 30)
  CROWN_CLUSTER_WRITE_BPS  if set, hold each node's writes to the disk under the data
                           directory to this many bytes a second, as a slower volume
                           would (a cgroup per node: blkio throttle on cgroup v1, io.max
                           on v2; needs root; what a node fsyncs is held back, the
                           kernel's own writeback is not on v1)
  CROWN_LOG_LEVEL, ...     any other CROWN_* variable is passed to crownd as usual
EOF
}

die() {
	echo "cluster.sh: $*" >&2
	exit 1
}

# node_index NAME -> 0..2
node_index() {
	case "$1" in
	node1 | 1) echo 0 ;;
	node2 | 2) echo 1 ;;
	node3 | 3) echo 2 ;;
	*) die "unknown node \"$1\" (expected node1, node2 or node3)" ;;
	esac
}

http_url() { echo "http://$HOST:$((HTTP_BASE + $1))"; }
raft_addr() { echo "$HOST:$((RAFT_BASE + $1))"; }
node_dir() { echo "$CLUSTER_DIR/${NODES[$1]}"; }
pid_file() { echo "$CLUSTER_DIR/${NODES[$1]}.pid"; }
log_file() { echo "$CLUSTER_DIR/${NODES[$1]}.log"; }

peers() {
	local i out=""
	for i in 0 1 2; do
		out+="${out:+,}${NODES[$i]}@$(raft_addr "$i")"
	done
	echo "$out"
}

all_urls() {
	local i out=""
	for i in 0 1 2; do
		out+="${out:+,}$(http_url "$i")"
	done
	echo "$out"
}

# is_ours PID INDEX: the process is a crownd running with this node's data dir.
is_ours() {
	local pid="$1" want
	want="$(node_dir "$2")"
	[[ "$pid" =~ ^[0-9]+$ ]] || return 1
	[[ -r "/proc/$pid/cmdline" ]] || return 1
	local -a argv=()
	mapfile -d '' -t argv <"/proc/$pid/cmdline" 2>/dev/null || return 1
	((${#argv[@]} > 0)) || return 1
	[[ "$(basename -- "${argv[0]}")" == crownd ]] || return 1
	local j
	for ((j = 1; j < ${#argv[@]} - 1; j++)); do
		if [[ "${argv[$j]}" == --data-dir && "${argv[$((j + 1))]}" == "$want" ]]; then
			return 0
		fi
	done
	return 1
}

# running_pid INDEX: prints the pid of the node's process when it is ours and
# alive; removes a stale pid file.
running_pid() {
	local f pid
	f="$(pid_file "$1")"
	[[ -f "$f" ]] || return 1
	pid="$(<"$f")"
	if is_ours "$pid" "$1"; then
		echo "$pid"
		return 0
	fi
	echo "cluster.sh: ${NODES[$1]}: removing stale pid file (pid ${pid:-?} is not this node's crownd)" >&2
	rm -f -- "$f"
	return 1
}

healthy() {
	"$CROWND" healthcheck --timeout 1s "$(http_url "$1")" >/dev/null 2>&1
}

# write_limit_cgroup I: a cgroup holding node I's writes to WRITE_BPS bytes a
# second on the disk under CLUSTER_DIR; prints its directory.
write_limit_cgroup() {
	local i="$1" dev parent cg
	[[ "$WRITE_BPS" =~ ^[1-9][0-9]*$ ]] || die "CROWN_CLUSTER_WRITE_BPS must be a positive number of bytes a second, not \"$WRITE_BPS\""
	dev="$(findmnt -no MAJ:MIN -T "$CLUSTER_DIR" 2>/dev/null | head -n 1 | tr -d ' ')" ||
		die "cannot find the device under $CLUSTER_DIR"
	[[ -n "$dev" ]] || die "cannot find the device under $CLUSTER_DIR"
	if [[ -e "/sys/dev/block/$dev/partition" ]]; then
		# Throttles apply to whole disks: the partition's parent.
		parent="$(dirname "$(realpath "/sys/dev/block/$dev")")"
		dev="$(cat "$parent/dev")"
	fi
	if [[ -d /sys/fs/cgroup/blkio ]]; then
		cg="/sys/fs/cgroup/blkio/crown-cluster-$((RAFT_BASE + i))"
		mkdir -p -- "$cg" && echo "$dev $WRITE_BPS" >"$cg/blkio.throttle.write_bps_device" ||
			die "cannot set a write limit in $cg (needs root)"
	elif grep -qw io /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
		echo +io >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || true
		cg="/sys/fs/cgroup/crown-cluster-$((RAFT_BASE + i))"
		mkdir -p -- "$cg" && echo "$dev wbps=$WRITE_BPS" >"$cg/io.max" ||
			die "cannot set a write limit in $cg (needs root and the io controller)"
	else
		die "CROWN_CLUSTER_WRITE_BPS needs cgroup v1's blkio or v2's io controller"
	fi
	echo "$cg"
}

need_binaries() {
	[[ -x "$CROWND" ]] || die "$CROWND not found: run make build first"
}

start_node() {
	local i="$1" pid dir log
	if pid="$(running_pid "$i")"; then
		echo "${NODES[$i]} already running (pid $pid)"
		return 0
	fi
	dir="$(node_dir "$i")"
	log="$(log_file "$i")"
	mkdir -p -- "$dir"
	local procs=/dev/null
	if [[ -n "$WRITE_BPS" ]]; then
		procs="$(write_limit_cgroup "$i")/cgroup.procs" || return 1
	fi
	# setsid detaches the node from this terminal; `exec` keeps the pid that
	# the inner shell wrote to the pid file, and the cgroup it joined (a node
	# that cannot join its limit's cgroup does not start, rather than run
	# unlimited).
	# shellcheck disable=SC2016 # $$ and $@ are the inner shell's
	CROWN_JOIN='' setsid bash -c 'echo $$ >"$1"; echo $$ >"$2" || exit 1; shift 2; exec "$@"' _ \
		"$(pid_file "$i")" "$procs" \
		"$CROWND" --node-id "${NODES[$i]}" --data-dir "$dir" \
		--http-addr "$HOST:$((HTTP_BASE + i))" --http-advertise "$(http_url "$i")" \
		--raft-addr "$(raft_addr "$i")" --peers "$(peers)" --log-format text \
		</dev/null >>"$log" 2>&1 &
	local n
	for ((n = 0; n < 50; n++)); do
		# Not running_pid: until the exec the pid file names the inner shell.
		pid="$(cat -- "$(pid_file "$i")" 2>/dev/null || true)"
		if is_ours "$pid" "$i"; then
			echo "${NODES[$i]} started (pid $pid, HTTP $(http_url "$i"), Raft $(raft_addr "$i"), log ${log#"$ROOT"/})"
			return 0
		fi
		sleep 0.1
	done
	echo "cluster.sh: ${NODES[$i]} did not start; last lines of $log:" >&2
	tail -n 20 -- "$log" >&2 || true
	return 1
}

wait_healthy() {
	local deadline=$((SECONDS + WAIT)) i pending pending_idx
	while :; do
		pending=()
		pending_idx=()
		for i in "$@"; do
			if ! running_pid "$i" >/dev/null 2>&1; then
				echo "cluster.sh: ${NODES[$i]} exited; last lines of $(log_file "$i"):" >&2
				tail -n 20 -- "$(log_file "$i")" >&2 || true
				return 1
			fi
			if ! healthy "$i"; then
				pending+=("${NODES[$i]}")
				pending_idx+=("$i")
			fi
		done
		if ((${#pending[@]} == 0)); then
			local names=()
			for i in "$@"; do names+=("${NODES[$i]}"); done
			echo "healthy: ${names[*]}"
			return 0
		fi
		if ((SECONDS >= deadline)); then
			echo "cluster.sh: not healthy after ${WAIT}s: ${pending[*]}" >&2
			for i in "${pending_idx[@]}"; do
				echo "cluster.sh: last lines of $(log_file "$i"):" >&2
				tail -n 20 -- "$(log_file "$i")" >&2 || true
			done
			return 1
		fi
		sleep 0.5
	done
}

stop_node() {
	local i="$1" sig="${2:-TERM}" pid n
	if ! pid="$(running_pid "$i")"; then
		echo "${NODES[$i]} not running"
		return 0
	fi
	kill -s "$sig" "$pid"
	# 40 s, as docker-compose.yml's stop_grace_period: crownd may wait 30 s
	# for in-flight requests before it closes Raft and the state files.
	for ((n = 0; n < 400; n++)); do
		is_ours "$pid" "$i" || break
		sleep 0.1
	done
	if is_ours "$pid" "$i"; then
		echo "${NODES[$i]} still running 40 s after SIG$sig; sending SIGKILL"
		kill -s KILL "$pid" 2>/dev/null || true
		for ((n = 0; n < 50; n++)); do
			is_ours "$pid" "$i" || break
			sleep 0.1
		done
	fi
	rm -f -- "$(pid_file "$i")"
	if [[ "$sig" == KILL ]]; then
		echo "${NODES[$i]} killed (pid $pid)"
	else
		echo "${NODES[$i]} stopped (pid $pid)"
	fi
}

cmd_status() {
	local i pid health
	printf '%-6s %-8s %-9s %-23s %s\n' NODE PID HEALTH HTTP RAFT
	for i in 0 1 2; do
		health=-
		if pid="$(running_pid "$i" 2>/dev/null)"; then
			if healthy "$i"; then health=healthy; else health=unhealthy; fi
		else
			pid=stopped
		fi
		printf '%-6s %-8s %-9s %-23s %s\n' "${NODES[$i]}" "$pid" "$health" "$(http_url "$i")" "$(raft_addr "$i")"
	done
	if [[ -x "$CROWNCTL" ]]; then
		echo
		"$CROWNCTL" --url "$(all_urls)" --timeout 3s cluster status || true
	fi
}

main() {
	local cmd="${1:-}"
	[[ $# -gt 0 ]] && shift
	case "$cmd" in
	-h | --help | help)
		usage
		return 0
		;;
	"")
		usage >&2
		return 2
		;;
	esac
	local -a idx=()
	case "$cmd" in
	start | stop)
		(($# <= 1)) || die "$cmd takes at most one NODE"
		if (($# == 1)); then idx=("$(node_index "$1")"); else idx=(0 1 2); fi
		;;
	kill | restart)
		(($# == 1)) || die "$cmd needs exactly one NODE (see --help)"
		idx=("$(node_index "$1")")
		;;
	status | clean)
		(($# == 0)) || die "$cmd takes no arguments"
		;;
	*)
		echo "cluster.sh: unknown command \"$cmd\"" >&2
		usage >&2
		return 2
		;;
	esac
	need_binaries
	mkdir -p -- "$CLUSTER_DIR"
	local i
	case "$cmd" in
	start)
		for i in "${idx[@]}"; do start_node "$i"; done
		wait_healthy "${idx[@]}"
		echo "see scripts/cluster.sh status, or bin/crownctl --url $(all_urls) cluster status"
		;;
	stop)
		for i in "${idx[@]}"; do stop_node "$i"; done
		;;
	kill)
		stop_node "${idx[0]}" KILL
		;;
	restart)
		stop_node "${idx[0]}"
		start_node "${idx[0]}"
		wait_healthy "${idx[0]}"
		;;
	status)
		cmd_status
		;;
	clean)
		for i in 0 1 2; do
			stop_node "$i"
			# A write limit's cgroup, empty once its node stopped.
			rmdir "/sys/fs/cgroup/blkio/crown-cluster-$((RAFT_BASE + i))" \
				"/sys/fs/cgroup/crown-cluster-$((RAFT_BASE + i))" 2>/dev/null || true
		done
		rm -rf -- "$CLUSTER_DIR"
		echo "removed $CLUSTER_DIR"
		;;
	esac
}

main "$@"
