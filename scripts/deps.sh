#!/usr/bin/env bash
# Install what cmfs's tests or its demo need and the machine lacks, from
# the distribution's packages (Debian/Ubuntu: apt-get, as root or through
# sudo). One list for both, so that CI and `make demo` cannot drift apart:
#
#   scripts/deps.sh ci     everything .ci/run's `make test` needs
#   scripts/deps.sh demo   what scripts/demo.sh needs: FUSE (fuse3)
#
# Only missing packages are installed; a machine that has them all is
# not touched. A missing /dev/fuse is tried with modprobe and otherwise
# reported: no package brings it.
set -euo pipefail

for=${1:-}
case $for in
ci | demo) ;;
*) echo "usage: $0 ci|demo" >&2; exit 2 ;;
esac

as_root() {
	if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

missing=()
command -v fusermount3 >/dev/null || missing+=(fuse3)
if [ "$for" = ci ]; then
	command -v xxhsum >/dev/null || missing+=(xxhash)
	# The README's recipe for the checksum of a file longer than 256 KiB
	# (split, xxhsum, xxd) is checked by internal/checksum's TestByHand.
	command -v xxd >/dev/null || missing+=(xxd)
	# The etcd cluster store's tests run a real etcd.
	command -v etcd >/dev/null || missing+=(etcd-server)
	# Preservation by reflink is tested on XFS made on a loop device
	# (TestReflinkXFS; cmroot's TestPreserveReflink): mkfs.xfs.
	command -v mkfs.xfs >/dev/null || missing+=(xfsprogs)
	# The status page of replicad serve --http is tested in headless
	# Chromium (TestStatusPage): Debian's chromium, without its recommends.
	command -v chromium >/dev/null || missing+=(chromium)
	# dist/systemd's units are checked with systemd-analyze verify
	# (TestUnitFiles) and run under systemd itself, as PID 1 of
	# namespaces of its own entered with nsenter and started without
	# some capabilities by setpriv (TestRealSystemd); mount(8) and
	# umount(8) run the fstab tests (TestMountHelper).
	{ command -v systemd-analyze && [ -x /lib/systemd/systemd ]; } >/dev/null || missing+=(systemd)
	{ command -v nsenter && command -v setpriv; } >/dev/null || missing+=(util-linux)
	command -v mount >/dev/null || missing+=(mount)
	# The benchmarks build libfuse's passthrough_ll; the tests don't need these,
	# but they are cheap.
	dpkg -s libfuse3-dev >/dev/null 2>&1 || missing+=(libfuse3-dev)
	command -v pkg-config >/dev/null || missing+=(pkg-config)
	command -v gcc >/dev/null || missing+=(gcc)
	command -v make >/dev/null || missing+=(make)
fi
if [ ${#missing[@]} -gt 0 ]; then
	echo "$for: installing ${missing[*]}"
	as_root apt-get update
	DEBIAN_FRONTEND=noninteractive as_root apt-get install -y --no-install-recommends "${missing[@]}"
fi

if [ ! -e /dev/fuse ]; then
	as_root modprobe fuse 2>/dev/null || true
fi
if [ ! -e /dev/fuse ]; then
	case $for in
	ci) echo "ci: /dev/fuse is missing; the integration tests will fail (run with --device /dev/fuse)" >&2 ;;
	demo) echo "demo: /dev/fuse is missing; nothing can be mounted (load the fuse module, or run the container with --device /dev/fuse)" >&2 ;;
	esac
fi
