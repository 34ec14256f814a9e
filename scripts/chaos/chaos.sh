#!/usr/bin/env bash
# Chaos runs against a live three-node Crown cluster; see docs/chaos.md and
# cmd/crown-chaos/DESIGN.md. Used by `make chaos-short`, `make chaos` and
# `make chaos-docker` (which build bin/crownd first).
#
#   scripts/chaos/chaos.sh short                 the CI suite: seven scenarios, under 5 minutes
#   scripts/chaos/chaos.sh all                   every scenario in scripts/chaos/scenarios
#   scripts/chaos/chaos.sh random [DURATION] [SEED]   a random schedule (default 30m, seed from the clock)
#   scripts/chaos/chaos.sh docker [DURATION] [SEED]   the Docker Compose flavour (scenarios, then a random schedule)
#   scripts/chaos/chaos.sh FILE.chaos...         the given scenario files
#
# Environment: CHAOS_REPORT (output directory, default ./chaos-report),
# CHAOS_FLAGS (extra `crown-chaos run` flags), DOCKER_IMAGE (crown:latest).
# The netns flavour needs root (network namespaces, iptables).
set -euo pipefail
SELF="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
ROOT="$(cd "$(dirname "$SELF")/../.." && pwd)"
cd "$ROOT"
SCEN=scripts/chaos/scenarios
REPORT="${CHAOS_REPORT:-chaos-report}"
# shellcheck disable=SC2206 # word splitting of the extra flags is intended
EXTRA=(${CHAOS_FLAGS:-})
# The CI suite: leader isolation, a bridge partition, SIGKILL of the leader,
# kill-all-and-restart, a paused leader, latency/loss and a flapping link,
# and a lost disk beside a stale follower and a dead leader.
SHORT=(isolate-leader bridge kill-leader kill-all pause-leader netem-flap wipe-stale-quorum)
# Scenarios the docker backend supports (isolation and process faults).
DOCKER=(isolate-leader kill-leader kill-all pause-leader)

usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$SELF"; }

mode="${1:-}"
[ -n "$mode" ] || { usage >&2; exit 2; }
shift || true
case "$mode" in -h | --help | help) usage; exit 0 ;; esac

if [ ! -x bin/crownd ]; then
	echo "chaos.sh: bin/crownd not found: run make build" >&2
	exit 2
fi
CGO_ENABLED=0 go build -trimpath -o bin/crown-chaos ./cmd/crown-chaos

args=()
backend=netns
case "$mode" in
short)
	for s in "${SHORT[@]}"; do args+=(--scenario "$SCEN/$s.chaos"); done
	;;
all)
	args+=(--scenario "$SCEN")
	;;
random)
	args+=(--random --duration "${1:-30m}" --seed "${2:-$(date +%s)}")
	;;
docker)
	backend=docker
	if [ $# -gt 0 ]; then
		args+=(--random --duration "$1" --seed "${2:-$(date +%s)}")
	else
		for s in "${DOCKER[@]}"; do args+=(--scenario "$SCEN/$s.chaos"); done
	fi
	args+=(--image "${DOCKER_IMAGE:-crown:latest}")
	;;
*.chaos)
	args+=(--scenario "$mode")
	for f in "$@"; do args+=(--scenario "$f"); done
	;;
*)
	echo "chaos.sh: unknown mode \"$mode\"" >&2
	usage >&2
	exit 2
	;;
esac

if [ "$backend" = netns ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "chaos.sh: the netns flavour needs root (network namespaces, iptables)" >&2
		exit 2
	fi
	scripts/chaos/deps.sh
	# An interrupted earlier run may have left namespaces behind.
	bin/crown-chaos cleanup
fi
exec bin/crown-chaos run --backend "$backend" --report "$REPORT" "${args[@]}" "${EXTRA[@]}"
