#!/usr/bin/env bash
# The cmfs story so far, in a temporary directory: mount a warehouse,
# overwrite and delete table files, drop a partition, read the journal,
# restore an original, unmount. Run it with `make demo` (needs FUSE:
# /dev/fuse and root, or a setuid fusermount3).
set -euo pipefail
cd "$(dirname "$0")/.."
CMFS=${CMFS:-$PWD/bin/cmfs}

work=$(mktemp -d /tmp/cmfs-demo.XXXXXX)
backing=$work/warehouse
mnt=$work/mnt
mkdir -p "$backing" "$mnt"

cleanup() {
	if mountpoint -q "$mnt" 2>/dev/null; then
		"$CMFS" umount "$mnt" 2>/dev/null || fusermount3 -u -z "$mnt" || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
run() { printf '$ %s\n' "$*"; "$@"; }
last_event() { "$CMFS" status "$backing" --json | sed 's/.*"last_event_id":\([0-9]*\).*/\1/'; }

step "Mount $backing at $mnt"
run "$CMFS" mount --daemon "$backing" "$mnt"

part=$mnt/sales.db/orders/dt=2024-01-01
step "Create a database, a table, a partition and a file"
run mkdir -p "$part"
printf 'order-1,10.00\norder-2,20.00\n' >"$part/part-0"
echo "wrote $part/part-0: $(cat "$part/part-0" | tr '\n' ' ')"

step "Overwrite it (O_TRUNC): the original goes to cmroot"
printf 'order-1,10.00\norder-2,25.00\norder-3,30.00\n' >"$part/part-0"
echo "now: $(tr '\n' ' ' <"$part/part-0")"

step "Delete it: preserved again"
run rm "$part/part-0"
deleted=$(last_event)
echo "the delete is event $deleted"

step "Drop a whole partition with rm -r"
run mkdir -p "$mnt/sales.db/orders/dt=2024-01-02"
echo a >"$mnt/sales.db/orders/dt=2024-01-02/part-0"
echo b >"$mnt/sales.db/orders/dt=2024-01-02/part-1"
run rm -r "$mnt/sales.db/orders/dt=2024-01-02"
run ls "$mnt/sales.db/orders"

step "The journal: every change, with checksums and cmroot names"
run "$CMFS" events "$backing"

step "Restore what event $deleted preserved (written through the mount, so it is journaled too)"
run "$CMFS" restore "$backing" --event "$deleted"
echo "back: $(tr '\n' ' ' <"$part/part-0")"
run "$CMFS" events "$backing" --from $((deleted + 1))

step "Status"
run "$CMFS" status "$backing"
run "$CMFS" fsck "$backing"

step "Unmount; the journal stays readable"
run "$CMFS" umount "$mnt"
run "$CMFS" status "$backing"
run "$CMFS" events "$backing" --from "$deleted" --to "$deleted" --json

step "Done (the temporary directory $work is removed on exit)"
