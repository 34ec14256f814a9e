#!/usr/bin/env bash
# Push and pop+ack throughput of one crownd node (make bench).
#
# Starts a single node on a fresh data directory, produces COUNT messages
# (256-byte payloads, pushes of 100) with crownctl bench, then consumes them
# (pops of 100, one ack/batch per pop), prints both reports and stops the
# node it started. Extra arguments go to both crownctl bench runs.
set -euo pipefail

usage() {
  cat <<USAGE
Usage: scripts/bench-node.sh [crownctl bench run flags...]

Environment: BENCH_COUNT (default 300000), BENCH_HTTP_PORT (default 16650),
BENCH_RAFT_PORT (default 17650), BENCH_DIR (default a new temporary directory).
Needs bin/crownd and bin/crownctl (make build).
USAGE
}
case "${1:-}" in -h|--help) usage; exit 0 ;; esac

root="$(cd "$(dirname "$0")/.." && pwd)"
crownd="$root/bin/crownd"
crownctl="$root/bin/crownctl"
[ -x "$crownd" ] && [ -x "$crownctl" ] || { echo "bench-node: run make build first" >&2; exit 2; }

count="${BENCH_COUNT:-300000}"
http_port="${BENCH_HTTP_PORT:-16650}"
raft_port="${BENCH_RAFT_PORT:-17650}"
dir="${BENCH_DIR:-$(mktemp -d -t crown-bench-node.XXXXXX)}"
url="http://127.0.0.1:$http_port"
mkdir -p "$dir"

"$crownd" --node-id bench1 --data-dir "$dir/data" --http-addr "127.0.0.1:$http_port" \
  --raft-addr "127.0.0.1:$raft_port" --log-level warn >"$dir/crownd.log" 2>&1 &
pid=$!
cleanup() {
  # Only the node this script started.
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    wait "$pid" 2>/dev/null || true
  fi
  [ -n "${BENCH_DIR:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT INT TERM

for _ in $(seq 100); do
  if "$crownd" healthcheck "$url" >/dev/null 2>&1; then break; fi
  sleep 0.1
done
"$crownd" healthcheck "$url" >/dev/null || { echo "bench-node: node did not become healthy" >&2; cat "$dir/crownd.log" >&2; exit 1; }

echo "== one node, $(nproc) cores: push (256-byte payloads, batches of 100, 8 producers, 8 partitions)"
"$crownctl" --url "$url" bench run --mode produce --count "$count" --run-id nodebench --progress off "$@"
echo
echo "== one node: pop + ack (batches of 100, 8 consumers, one consumer group)"
"$crownctl" --url "$url" bench run --mode consume --count "$count" --run-id nodebench --progress off "$@"
