#!/usr/bin/env bash
# Installs what the chaos runs need, from Debian packages, when missing:
# iproute2 (ip netns, veth, bridge) and iptables (partitions, NFQUEUE).
# tc netem is used when the kernel has sch_netem; otherwise crown-chaos
# falls back to its own NFQUEUE delayer, so nothing else is needed.
set -euo pipefail
need=()
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v tc >/dev/null 2>&1 || need+=(iproute2)
command -v iptables >/dev/null 2>&1 || need+=(iptables)
command -v iptables-restore >/dev/null 2>&1 || need+=(iptables)
if [ ${#need[@]} -gt 0 ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "deps.sh: missing ${need[*]} and not root: install them with apt-get" >&2
		exit 1
	fi
	mapfile -t uniq < <(printf '%s\n' "${need[@]}" | sort -u)
	echo "deps.sh: installing ${uniq[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${uniq[@]}" >/dev/null
fi
