#!/usr/bin/env bash
# The cmfs story, in a temporary directory, in about 15 seconds:
#
#   1. a protected mount: overwrite and delete table files, drop a
#      partition, read the journal, restore an original;
#   2. a replica: a BOOTSTRAP dump of the warehouse loaded into another
#      directory, then `replicad follow` keeping it current while the
#      source changes;
#   3. two replicad nodes: a container put, closed and replicated from
#      one to the other;
#   4. a three-node cluster: a container the coordinator keeps two copies
#      of, one node killed, its copy made again on the third.
#
# Run it with `make demo` (which installs fuse3 where missing; FUSE needs
# /dev/fuse and root, or a setuid fusermount3). CMFS and REPLICAD name the
# binaries (default bin/ of this tree). Every replicad process it starts
# listens on 127.0.0.1 on a port it picks, and is stopped by its pid on
# the way out; nothing outside the temporary directory is touched.
set -euo pipefail
cd "$(dirname "$0")/.."
CMFS=${CMFS:-$PWD/bin/cmfs}
REPLICAD=${REPLICAD:-$PWD/bin/replicad}

for bin in "$CMFS" "$REPLICAD"; do
	[ -x "$bin" ] || { echo "demo: $bin is missing: run make build (or make demo)" >&2; exit 1; }
done
CMFS=$(realpath "$CMFS")
REPLICAD=$(realpath "$REPLICAD")

# Everything happens in one temporary directory, named relative to it as
# a user in it would.
work=$(mktemp -d /tmp/cmfs-demo.XXXXXX)
cd "$work"
backing=warehouse
mnt=mnt
mkdir -p "$backing" "$mnt"

# The same-host credential of every replicad below: serve creates the
# file (0600) and every client sends it.
export REPLICAD_TOKEN_FILE=$work/replicad.token

declare -A pids=()
cleanup() {
	local name
	for name in "${!pids[@]}"; do
		kill -KILL "${pids[$name]}" 2>/dev/null || true
		wait "${pids[$name]}" 2>/dev/null || true
	done
	if mountpoint -q "$work/$mnt" 2>/dev/null; then
		"$CMFS" umount "$work/$mnt" 2>/dev/null || fusermount3 -u -z "$work/$mnt" || true
	fi
	cd /
	rm -rf "$work"
}
trap cleanup EXIT

# The commands are shown as a user would type them.
cmfs() { "$CMFS" "$@"; }
replicad() { "$REPLICAD" "$@"; }

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
run() { printf '$ %s\n' "$*"; "$@"; }
say() { printf '%s\n' "$*"; }
# fail says what went wrong, with the logs of the processes started, and
# ends the demo.
fail() {
	local log
	printf 'demo: %s\n' "$*" >&2
	for log in "$work"/logs/*.log; do
		[ -e "$log" ] || continue
		printf -- '--- %s\n' "${log##*/}" >&2
		tail -n 20 "$log" >&2
	done
	exit 1
}
last_event() { "$CMFS" status "$backing" --json | sed 's/.*"last_event_id":\([0-9]*\).*/\1/'; }

# until SECONDS WHAT COMMAND...: polls COMMAND every 0.1 s until it
# succeeds; the demo fails, naming WHAT, if it has not after SECONDS.
until_ok() {
	local secs=$1 what=$2
	local deadline=$((SECONDS + secs))
	shift 2
	until "$@" >/dev/null 2>&1; do
		[ "$SECONDS" -lt "$deadline" ] || fail "$what: not within ${secs}s"
		sleep 0.1
	done
}

# start NAME ARGS...: runs `replicad ARGS` in the background, its output
# in logs/NAME.log, waits for its "listening on" line and sets addr to
# the address it picked.
start() {
	local name=$1
	shift
	printf '$ replicad %s >logs/%s.log 2>&1 &\n' "$*" "$name"
	"$REPLICAD" "$@" >"logs/$name.log" 2>&1 &
	pids[$name]=$!
	local deadline=$((SECONDS + 15))
	until grep -q '^listening on ' "logs/$name.log"; do
		kill -0 "${pids[$name]}" 2>/dev/null || fail "replicad $name exited before it listened"
		[ "$SECONDS" -lt "$deadline" ] || fail "replicad $name: not listening within 15s"
		sleep 0.1
	done
	addr=$(sed -n 's/^listening on \([^ ]*\) (.*/\1/p' "logs/$name.log" | head -n 1)
	say "$name listens on $addr"
}

# stop NAME [SIGNAL]: signals a process start started (TERM by default)
# and waits for it.
stop() {
	local name=$1 sig=${2:-TERM} code=0
	printf '$ kill -%s %s  # %s\n' "$sig" "${pids[$name]}" "$name"
	kill "-$sig" "${pids[$name]}"
	# (braces: bash's own "Killed" notice is not part of the story)
	{ wait "${pids[$name]}" || code=$?; } 2>/dev/null
	unset "pids[$name]"
	say "$name exited with status $code"
}

mkdir logs vol
say "working in $work, removed on exit"

#### 1. A protected mount

step "Mount $backing at $mnt"
run cmfs mount --daemon "$backing" "$mnt"

part=$mnt/sales.db/orders/dt=2024-01-01
step "Create a database, a table, a partition and a file"
run mkdir -p "$part"
printf 'order-1,10.00\norder-2,20.00\n' >"$part/part-0"
say "wrote $part/part-0: $(tr '\n' ' ' <"$part/part-0")"

step "Overwrite it (O_TRUNC): the original goes to cmroot"
printf 'order-1,10.00\norder-2,25.00\norder-3,30.00\n' >"$part/part-0"
say "now: $(tr '\n' ' ' <"$part/part-0")"

step "Delete it: preserved again"
run rm "$part/part-0"
deleted=$(last_event)
say "the delete is event $deleted"

step "Drop a whole partition with rm -r"
run mkdir -p "$mnt/sales.db/orders/dt=2024-01-02"
echo a >"$mnt/sales.db/orders/dt=2024-01-02/part-0"
echo b >"$mnt/sales.db/orders/dt=2024-01-02/part-1"
run rm -r "$mnt/sales.db/orders/dt=2024-01-02"
run ls "$mnt/sales.db/orders"

step "The journal: every change, with checksums and cmroot names"
run cmfs events "$backing"

step "Restore what event $deleted preserved (written through the mount, so it is journaled too)"
run cmfs restore "$backing" --event "$deleted"
say "back: $(tr '\n' ' ' <"$part/part-0")"
run cmfs events "$backing" --from $((deleted + 1))

step "Status"
run cmfs status "$backing"
run cmfs fsck "$backing"

#### 2. A replica

replica=replica
step "Dump the warehouse: a BOOTSTRAP lists every file (size, xxh64) as of the newest event, copying none"
out=$(run replicad dump --state "$backing/.cmfs" --out dumps)
say "$out"
dump=dumps/$(basename "$(sed -n 2p <<<"$out")")
[ -d "$dump" ] || fail "dump printed no dump directory: $out"
run ls "$dump"

step "Load it into $replica: each file fetched once from the source, verified, made visible with its event"
run replicad load --dump "$dump" --target "$replica" --source-state "$backing/.cmfs"
run find "$replica" -path "$replica/.repl*" -prune -o -type f -print
say "replica's part-0: $(tr '\n' ' ' <"$replica/sales.db/orders/dt=2024-01-01/part-0")"
run replicad status --target "$replica"

step "Serve the source's files and journal, and follow it: the replica keeps up by itself"
start source serve --state "$backing/.cmfs" --listen 127.0.0.1:0
source=$addr
printf '$ replicad follow --source %s --target %s --interval 200ms >logs/follow.log 2>&1 &\n' "$source" "$replica"
"$REPLICAD" follow --source "$source" --target "$replica" --interval 200ms >logs/follow.log 2>&1 &
pids[follow]=$!

step "A further change at the source: a new partition"
run mkdir -p "$mnt/sales.db/orders/dt=2024-01-03"
printf 'order-4,40.00\n' >"$mnt/sales.db/orders/dt=2024-01-03/part-0"
say "wrote $mnt/sales.db/orders/dt=2024-01-03/part-0 (event $(last_event))"
new=$replica/sales.db/orders/dt=2024-01-03/part-0
until_ok 30 "the new file at the replica" grep -qx 'order-4,40.00' "$new"
say "follow: $new appeared: $(cat "$new")"
run replicad status --target "$replica"
run replicad slots --source "$source"
stop follow
stop source

step "Unmount; the journal stays readable"
run cmfs umount "$mnt"
run cmfs status "$backing"
run cmfs events "$backing" --from "$deleted" --to "$deleted" --json

#### 3. Two nodes

files=("$backing"/sales.db/orders/*/part-*)
step "Two replicad nodes, each keeping containers in its own volume"
start dn1 serve --listen 127.0.0.1:0 --node-id dn1 --volume vol/dn1
dn1=$addr
start dn2 serve --listen 127.0.0.1:0 --node-id dn2 --volume vol/dn2
dn2=$addr

step "Put the warehouse's files into a container on dn1, one block each, and close it"
out=$(run replicad container put --server "$dn1" "${files[@]}")
say "$out"
id=$(awk 'NR == 2 { print $1 }' <<<"$out")
sum=$(awk 'NR == 2 { print $2 }' <<<"$out")
run replicad container close --server "$dn1" "$id"

step "Replicate it to dn2: a tar stream, checked whole, unpacked and scanned there"
run replicad container replicate --server "$dn1" "$id" --to "$dn2" --wait-scan
run replicad container list --server "$dn2"
run replicad container get --server "$dn2" "$sum" -o got
run cmp got "${files[0]}"
say "dn2 serves ${files[0]} byte for byte"
stop dn1
stop dn2

#### 4. A cluster healing itself

step "Three nodes on three racks: dn1 also the coordinator (its state in a bbolt file), the others join it"
# Timings in fractions of a second so that the story fits in one: the
# defaults are a 3s heartbeat, STALE after 30s, DEAD after 60s.
timings=(--heartbeat 100ms --stale-after 1s --dead-after 2s --rm-interval 200ms)
start cluster-dn1 serve --listen 127.0.0.1:0 --node-id dn1 --rack r1 --volume vol/c1 \
	--coordinator --cluster-store cluster.db "${timings[@]}"
coord=$addr
declare -A node=([dn1]=cluster-dn1)
declare -A nodeaddr=([dn1]=$coord)
for i in 2 3; do
	start "cluster-dn$i" serve --listen 127.0.0.1:0 --node-id "dn$i" --rack "r$i" --volume "vol/c$i" \
		--join "$coord" --heartbeat 100ms
	node[dn$i]=cluster-dn$i
	nodeaddr[dn$i]=$addr
done
healthy_nodes() { [ "$(replicad admin nodes --server "$coord" | grep -c ' HEALTHY ')" -eq 3 ]; }
until_ok 20 "three HEALTHY nodes" healthy_nodes
run replicad admin nodes --server "$coord"

# holders: the nodes with a CLOSED copy of $id, as admin containers lists
# them ("dn2:CLOSED dn3:CLOSED").
holders() { replicad admin containers --server "$coord" | awk -v id="$id" '$1 == id' | grep -o 'dn[0-9]*:CLOSED' | cut -d: -f1 | sort; }
healthy_on() { # healthy_on N [NODE]: HEALTHY with N CLOSED copies, one of them on NODE
	replicad admin containers --server "$coord" | awk -v id="$id" '$1 == id' | grep -q ' HEALTHY ' &&
		[ "$(holders | grep -c .)" -ge "$1" ] && { [ -z "${2:-}" ] || holders | grep -qx "$2"; }
}

step "A container of replica:2 put and closed on dn2: the coordinator has a second copy made"
out=$(run replicad container put --server "${nodeaddr[dn2]}" --replication replica:2 "${files[@]}")
say "$out"
id=$(awk 'NR == 2 { print $1 }' <<<"$out")
run replicad container close --server "${nodeaddr[dn2]}" "$id"
until_ok 30 "container $id HEALTHY with two copies" healthy_on 2
run replicad admin containers --server "$coord"

victim=
for n in $(holders); do
	[ "$n" = dn1 ] || { victim=$n; break; }
done
[ -n "$victim" ] || fail "no copy outside the coordinator: $(holders)"
spare=
for n in dn1 dn2 dn3; do
	holders | grep -qx "$n" || spare=$n
done
step "Kill $victim (kill -9), which holds a copy: once DEAD, its copy is made again on $spare"
stop "${node[$victim]}" KILL
dead() { replicad admin nodes --server "$coord" | awk -v n="$victim" '$1 == n' | grep -q ' DEAD '; }
until_ok 20 "$victim DEAD" dead
run replicad admin nodes --server "$coord"
until_ok 30 "container $id copied to $spare" healthy_on 2 "$spare"
run replicad admin containers --server "$coord"
run replicad container list --server "${nodeaddr[$spare]}"
say "healed: $spare holds container $id after $victim died ($victim's copy is listed as it last reported it; were $victim to come back, one of the three copies would be deleted as an extra)"
for n in dn1 dn2 dn3; do
	[ "$n" = "$victim" ] || stop "${node[$n]}"
done

step "Done (the temporary directory $work is removed on exit)"
