#!/usr/bin/env bash
# Rolling upgrade check with real binaries: a three-node cluster of an older
# build is given tagged queues, messages, discovery pops and snapshots, then
# upgraded as docs/deployments.md says (followers first, leadership
# transferred, the last node), with pushes, tag moves, OJS PATCHes and
# deletions between the steps, and the old node made to fall behind the new
# leader's log. A copy of the same cluster runs the same steps on the old
# build alone. At every step the discovery pops must claim the same messages
# from the same queues on both, every node must answer the queue listing
# (namespace, task, offset, limit; linearizable reads) alike and as the copy
# does, and once the last node is upgraded the three digests must agree.
# See --help.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
W="$(realpath -m -- "${UPGRADE_CHECK_DIR:-$ROOT/data/upgrade-check}")"
OLD=$W/bin-old
NEW=$W/bin-new
HB=${UPGRADE_CHECK_HTTP_PORT:-28501}
RB=${UPGRADE_CHECK_RAFT_PORT:-28601}
PEERS="node1@127.0.0.1:$RB,node2@127.0.0.1:$((RB + 1)),node3@127.0.0.1:$((RB + 2))"
RUN=""

log() { echo "upgrade-check [$(date +%T)] $*" >&2; }
url() { echo "http://127.0.0.1:$((HB + $1 - 1))"; }

start() { # start N BIN
	local n=$1 bin=$2 d=$W/$RUN/node$1
	mkdir -p "$d"
	echo "=== start $(basename "$bin") $(date +%T)" >>"$W/$RUN/node$n.log"
	"$bin/crownd" --node-id "node$n" --data-dir "$d" --http-addr "127.0.0.1:$((HB + n - 1))" \
		--http-advertise "$(url "$n")" --raft-addr "127.0.0.1:$((RB + n - 1))" --peers "$PEERS" \
		--log-format text --raft-snapshot-log-bytes 32768 --raft-trailing-logs 4 \
		--raft-trailing-log-bytes 8192 --verify-acks \
		>>"$W/$RUN/node$n.log" 2>&1 </dev/null &
	echo $! >"$W/$RUN/node$n.pid"
	log "started node$n ($bin) pid $!"
}

stop() { # stop N [KILL]
	local n=$1 f=$W/$RUN/node$1.pid pid
	[[ -f $f ]] || return 0
	pid=$(cat "$f")
	if [[ ${2:-} == KILL ]]; then kill -KILL "$pid" 2>/dev/null || true; else kill -TERM "$pid" 2>/dev/null || true; fi
	for _ in $(seq 1 400); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	kill -0 "$pid" 2>/dev/null && { kill -KILL "$pid"; sleep 0.5; }
	rm -f "$f"
	log "stopped node$n"
}

stopall() { for n in 1 2 3; do stop "$n"; done; }

healthy() { # N [seconds]
	for _ in $(seq 1 $((${2:-30} * 10))); do
		curl -sf -o /dev/null --max-time 1 "$(url "$1")/health" && return 0
		sleep 0.1
	done
	log "node$1 not healthy"
	return 1
}

live() { for n in 1 2 3; do [[ -f $W/$RUN/node$n.pid ]] && echo "$n"; done; }
any() { live | head -1; }

leader() {
	curl -s "$(url "$(any)")/api/v1/cluster/status" | jq -r '.raft.leader_id' | sed 's/node//'
}

post() { # PATH JSON
	curl -s -X POST -H 'content-type: application/json' --max-time 30 "$(url "$(any)")$1" -d "$2"
}

configure() { # queue ns task
	post /api/v1/configure "{\"queue\":\"$1\",\"namespace\":\"$2\",\"task\":\"$3\"}" | jq -c '[.queue,.namespace,.task]'
}

push() { # queue partition txid [bytes]
	local pl='{"x":1}'
	[[ -n ${4:-} ]] && pl="\"$(head -c "$4" /dev/zero | tr '\0' a)\""
	post /api/v1/push "{\"items\":[{\"queue\":\"$1\",\"partition\":\"$2\",\"transactionId\":\"$3\",\"payload\":$pl}]}" >/dev/null
}

pushmany() { # queue prefix count  (3 partitions)
	local items="" i
	for i in $(seq 1 "$3"); do
		items+="{\"queue\":\"$1\",\"partition\":\"p$((i % 3))\",\"transactionId\":\"$2-$i\",\"payload\":{\"i\":$i}},"
	done
	post /api/v1/push "{\"items\":[${items%,}]}" >/dev/null
}

# The discovery pops every probe makes, in this order.
SCOPES=("g1 namespace=alpha" "g2 task=t1" "g3 namespace=beta&task=t2" "g4 namespace=gamma" "g5 namespace=alpha&task=t1")

pops() { # label
	local s g q out
	for s in "${SCOPES[@]}"; do
		g=${s%% *}
		q=${s#* }
		for _ in 1 2 3; do
			out=$(curl -s --max-time 30 "$(url "$(any)")/api/v1/pop?$q&consumerGroup=$g&batch=2&autoAck=true&partitions=2" |
				jq -c '[.messages[]? | [.queue,.partition,.transactionId]]' 2>/dev/null || echo '"204"')
			echo "pop $1 $g $q ${out:-\"204\"}"
		done
	done
}

LISTS=("" "namespace=alpha" "task=t1" "namespace=beta&task=t2" "namespace=gamma" "namespace=alpha&offset=1&limit=3"
	"task=t2&offset=2" "limit=5" "offset=4&limit=4" "namespace=nosuch" "namespace=alpha&limit=0")

listings() { # label: the leader's answer, then any other node's that differs
	local l n first got ld
	ld=$(leader)
	for l in "${LISTS[@]}"; do
		first=""
		for n in $ld $(live | grep -vx "$ld"); do
			got=$(curl -s --max-time 6 "$(url "$n")/api/v1/resources/queues?$l&consistency=linearizable" |
				jq -c '[.queues[] | [.name,.namespace,.task,.partitions,.messages]]' 2>/dev/null) || got="error"
			if [[ -z $first ]]; then
				first=$got
				echo "list $1 [$l] $got"
			elif [[ $got != "$first" ]]; then
				echo "LISTING DIFFERS $1 [$l] node$n: $got"
			fi
		done
	done
}

digests() { # label: wait for equal applied indexes, then record
	local n a want ok
	for _ in $(seq 1 100); do
		want="" ok=1
		for n in $(live); do
			a=$(curl -s --max-time 2 "$(url "$n")/internal/v1/digest" | jq -r .applied_index 2>/dev/null) || a=none
			[[ -z $want ]] && want=$a
			[[ $a == "$want" ]] || ok=0
		done
		((ok)) && break
		sleep 0.2
	done
	for n in $(live); do
		echo "digest $1 node$n $(curl -s --max-time 5 "$(url "$n")/internal/v1/digest" | jq -r '"\(.applied_index) \(.digest[:16])"' 2>/dev/null || echo none)"
	done >>"$W/$RUN/digests.txt"
	tail -n "$(live | wc -l)" "$W/$RUN/digests.txt" >&2
}

caughtup() { # every live node at the leader's commit index (up to 60 s)
	local n a c
	for _ in $(seq 1 300); do
		c=$(curl -s --max-time 2 "$(url "$(any)")/api/v1/cluster/status" | jq -r .raft.commit_index 2>/dev/null) || c=""
		a=1
		for n in $(live); do
			[[ $(curl -s --max-time 2 "$(url "$n")/api/v1/cluster/status" | jq -r .raft.applied_index 2>/dev/null) -ge ${c:-1} ]] 2>/dev/null || a=0
		done
		((a)) && return 0
		sleep 0.2
	done
}

probe() { # label
	log "probe $1"
	[[ $1 == 4 ]] || caughtup
	pops "$1" >>"$W/$RUN/out.txt"
	listings "$1" >>"$W/$RUN/out.txt"
	digests "$1"
}

ojs() { # METHOD PATH [JSON]
	curl -s -X "$1" -H 'content-type: application/json' --max-time 30 "$(url "$(any)")$2" ${3:+-d "$3"} -o /dev/null -w '%{http_code}'
}

mutate() { # step
	local k=$1
	log "mutate $k"
	{
		case $k in
		1)
			echo "m1 configure $(configure q03 gamma t2)" # tags move
			echo "m1 configure $(configure q04 alpha t1)"
			pushmany alpha.t1.zz s1 6
			# A transaction whose push creates a queue and whose ack fails:
			# the rollback takes the queue, and its index entries, back.
			echo "m1 txn $(post /api/v1/transaction '{"operations":[{"type":"push","items":[{"queue":"alpha.t1.txq","payload":1}]},{"type":"ack","transactionId":"nope","partitionId":"00000000-0000-0000-0000-000000000000","status":"completed"}]}' | jq -c .success)"
			;;
		2)
			echo "m2 configure $(configure q00new alpha t1)" # a new queue before the others
			echo "m2 configure $(configure q19 '' '')"      # out of every tag
			echo "m2 patch $(ojs PATCH /ojs/v1/queues/q05 '{"state":"paused"}')"
			echo "m2 patch $(ojs PATCH /ojs/v1/queues/q06 '{"processing":{"max_concurrency":1}}')"
			pushmany q00new s2 6
			;;
		3)
			echo "m3 delete purge $(ojs DELETE '/ojs/v1/queues/q07?strategy=purge')"
			echo "m3 delete discard $(ojs DELETE '/ojs/v1/queues/q09?strategy=discard')"
			echo "m3 delete move $(ojs DELETE '/ojs/v1/queues/q11?strategy=move&target_queue=alpha.t1.moved')"
			echo "m3 delete reject $(ojs DELETE '/ojs/v1/queues/q13?strategy=reject')"
			echo "m3 queen delete $(curl -s -X DELETE -o /dev/null -w '%{http_code}' "$(url "$(any)")/api/v1/resources/queues/q15")"
			# A deletion that waits for an active job, finished by its ack.
			local m
			m=$(curl -s "$(url "$(any)")/api/v1/pop/queue/q17?batch=1")
			echo "m3 delete active $(ojs DELETE '/ojs/v1/queues/q17?strategy=purge')"
			echo "m3 ack $(post /api/v1/ack "$(jq -c '{transactionId:.messages[0].transactionId,partitionId:.messages[0].partitionId,leaseId:.messages[0].leaseId,status:"completed"}' <<<"$m")" | jq -c '.[0].success')"
			echo "m3 q17 gone $(curl -s -o /dev/null -w '%{http_code}' "$(url "$(any)")/api/v1/resources/queues/q17")"
			echo "m3 patch $(ojs PATCH /ojs/v1/queues/q05 '{"state":"active"}')"
			;;
		4)
			echo "m4 configure $(configure q21 beta t2)"
			local i
			for i in $(seq 1 24); do push bulk p0 "s4-big-$i" 4000; done
			;;
		5)
			echo "m5 configure $(configure q03 alpha t1)"
			echo "m5 configure $(configure "q\u00e9" alpha t1)"
			pushmany "q\u00e9" s5 3
			;;
		esac
	} >>"$W/$RUN/out.txt"
}

snapshots() { # N: snapshot count on disk
	ls "$W/$RUN/node$1/raft/snapshots" 2>/dev/null | grep -vc tmp || true
}

seed() {
	RUN=seed
	rm -rf "${W:?}/seed"
	mkdir -p "$W/seed"
	for n in 1 2 3; do start "$n" "$OLD"; done
	for n in 1 2 3; do healthy "$n"; done
	local i ns task
	for i in $(seq -w 1 24); do
		ns=beta task=t2
		((10#$i % 2)) && ns=alpha
		((10#$i % 3)) && task=t1
		configure "q$i" "$ns" "$task" >/dev/null
	done
	configure "" alpha t1 >/dev/null # the empty name
	for q in $(seq -f 'q%02g' 1 24) gamma.t1.a gamma.t2.b alpha.t1.zz beta.t2.y; do
		pushmany "$q" "seed-$q" 9
	done
	RUN=seed pops seed >/dev/null
	for i in $(seq 1 24); do push bulk p0 "seed-big-$i" 4000; done
	sleep 8
	for n in 1 2 3; do log "node$n snapshots: $(snapshots "$n")"; done
	RUN=seed pops seed2 >/dev/null
	stopall
}

run() { # ref|upg
	RUN=$1
	local to=$OLD
	[[ $RUN == upg ]] && to=$NEW
	rm -rf "${W:?}/$RUN"
	cp -a "$W/seed" "$W/$RUN"
	rm -f "$W/$RUN"/*.log "$W/$RUN"/*.pid
	: >"$W/$RUN/out.txt"
	: >"$W/$RUN/digests.txt"
	for n in 1 2 3; do start "$n" "$OLD"; done
	for n in 1 2 3; do healthy "$n"; done
	sleep 2
	probe 0
	local L F1 F2
	L=$(leader)
	read -r F1 F2 < <(for n in 1 2 3; do [[ $n != "$L" ]] && echo "$n"; done | xargs)
	log "leader node$L, followers node$F1 node$F2"
	echo "roles leader=$L followers=$F1,$F2" >>"$W/$RUN/digests.txt"
	# 1. the first follower
	stop "$F1"
	start "$F1" "$to"
	healthy "$F1"
	mutate 1
	probe 1
	# 1b. the upgraded follower falls behind the old leader's log and
	# installs its (older schema) snapshot
	stop "$F1"
	for i in $(seq 1 24); do push bulk p1 "s1b-big-$i" 4000; done
	sleep 8
	log "node$L snapshots: $(snapshots "$L")"
	start "$F1" "$to"
	healthy "$F1"
	sleep 3
	grep -E 'Installed remote|built the queue tag index|state restored' "$W/$RUN/node$F1.log" | tail -n 4 | cut -c1-200 >&2 || true
	probe 1b
	# 2. the second follower
	stop "$F2"
	start "$F2" "$to"
	healthy "$F2"
	mutate 2
	probe 2
	# 3. leadership to an upgraded node
	log "transfer: $(post /api/v1/cluster/transfer-leadership "{\"id\":\"node$F1\"}")"
	sleep 1
	log "leader now node$(leader)"
	mutate 3
	probe 3
	# 4. the old node, now a follower, falls behind the log and meets the
	# new leader's snapshot
	stop "$L"
	mutate 4
	sleep 8
	log "node$F1 snapshots: $(snapshots "$F1")"
	start "$L" "$OLD"
	sleep 15
	log "node$L health: $(curl -s --max-time 2 "$(url "$L")/health")"
	grep -iE 'snapshot|schema|restore' "$W/$RUN/node$L.log" | tail -n 8 >&2 || true
	probe 4
	# 4b. the old node restarted on the old build once more
	stop "$L"
	start "$L" "$OLD"
	sleep 10
	log "node$L restarted on the old build: alive=$(kill -0 "$(cat "$W/$RUN/node$L.pid")" 2>/dev/null && echo yes || echo no) health: $(curl -s --max-time 2 "$(url "$L")/health")"
	tail -n 5 "$W/$RUN/node$L.log" >&2
	# 5. the last node on the new build
	stop "$L"
	start "$L" "$to"
	healthy "$L" 60
	mutate 5
	probe 5
	stopall
}

usage() {
	cat <<USAGE
Usage: scripts/upgrade-check.sh OLD_REV

Builds crownd at OLD_REV (git archive) and from this working tree, then runs
the rolling upgrade check described at the top of this script. Three runs of
three nodes each, one after the other, about 7 minutes in all.

  UPGRADE_CHECK_DIR        work directory (default ./data/upgrade-check; emptied)
  UPGRADE_CHECK_HTTP_PORT  first HTTP port (default 28501; three are used)
  UPGRADE_CHECK_RAFT_PORT  first Raft port (default 28601; three are used)

Exit status 0 when every step compared equal, 1 otherwise; $W/ref and
$W/upg keep each run's answers (out.txt), digests and node logs.
USAGE
}

build() { # REV|"" DIR
	local src=$ROOT
	if [[ -n $1 ]]; then
		src=$W/src-$(basename "$2")
		mkdir -p "$src"
		git -C "$ROOT" archive "$1" | tar -x -C "$src"
	fi
	(cd "$src" && CGO_ENABLED=0 go build -o "$2/crownd" ./cmd/crownd)
}

check() {
	local bad=0
	# The old node stranded behind the new leader's snapshot at step 4
	# (a schema change) cannot answer a linearizable read; nothing else
	# may differ.
	if ! diff <(grep -v '^LISTING DIFFERS 4 ' "$W/upg/out.txt") "$W/ref/out.txt" >"$W/diff.txt"; then
		log "the upgraded cluster answered otherwise than the old build's ($W/diff.txt):"
		head -n 20 "$W/diff.txt" >&2
		bad=1
	fi
	if grep -q '^LISTING DIFFERS' "$W/ref/out.txt"; then
		log "the old build's nodes disagreed among themselves"
		bad=1
	fi
	local last
	last=$(grep '^digest 5 ' "$W/upg/digests.txt" | awk '{print $4, $5}' | sort -u | wc -l)
	if [[ $last != 1 ]]; then
		log "the upgraded nodes' digests differ: $(grep '^digest 5 ' "$W/upg/digests.txt" | tr '\n' ';')"
		bad=1
	fi
	log "stranded old node at step 4: $(grep -c '^LISTING DIFFERS 4 ' "$W/upg/out.txt" || true) listings it could not answer"
	return $bad
}

trap 'stopall' EXIT
case ${1:-} in
-h | --help)
	usage
	;;
"")
	usage >&2
	exit 2
	;;
*)
	rm -rf "${W:?}"
	mkdir -p "$OLD" "$NEW"
	build "$1" "$OLD"
	build "" "$NEW"
	seed
	run ref
	run upg
	if check; then
		log "passed"
	else
		log "FAILED"
		exit 1
	fi
	;;
esac
