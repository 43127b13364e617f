#!/usr/bin/env bash
# make install / make uninstall: put cmfs where a service runs it from,
# and take away exactly what was put there.
#
#   PREFIX=/usr/local DESTDIR= scripts/install.sh install|uninstall
#
# install copies what make build and make man completions left in bin/:
#
#   PREFIX/bin/cmfs, PREFIX/bin/replicad
#   PREFIX/share/man/man1/*.1                     one page per command
#   PREFIX/share/bash-completion/completions/{cmfs,replicad}
#   PREFIX/share/zsh/site-functions/{_cmfs,_replicad}
#   PREFIX/share/fish/vendor_completions.d/{cmfs,replicad}.fish
#   PREFIX/lib/systemd/system/*.service           dist/systemd/, if the tree has it
#   PREFIX/sbin/mount.fuse.cmfs                   bin/mount.fuse.cmfs, if built
#   PREFIX/share/cmfs/install-manifest            what this list became
#
# The manifest names every file install wrote and every directory it had
# to create (paths as seen without DESTDIR, so a staged tree records its
# final places). uninstall removes those files, the manifest, and then
# those directories that are empty; it never removes a directory install
# did not make, nor anything else in one. A second install over the first
# removes what the first put there and the second does not (a man page of
# a command since removed), and keeps the first's directories on record.
set -euo pipefail
cd "$(dirname "$0")/.."

prefix=${PREFIX:-/usr/local}
destdir=${DESTDIR:-}
case $prefix in
/*) ;;
*) echo "install: PREFIX must be an absolute path, not '$prefix'" >&2; exit 1 ;;
esac
prefix=${prefix%/}
manifest=$prefix/share/cmfs/install-manifest

# files: "MODE SRC DST" triples, DST without DESTDIR.
files=()
add() { files+=("$1"$'\t'"$2"$'\t'"$3"); }

collect() {
	local p f
	for p in cmfs replicad; do
		[ -x "bin/$p" ] || { echo "install: bin/$p is missing: run make build" >&2; exit 1; }
		add 0755 "bin/$p" "$prefix/bin/$p"
	done
	if ! compgen -G 'bin/man/*.1' >/dev/null; then
		echo "install: no man pages in bin/man: run make man" >&2
		exit 1
	fi
	for f in bin/man/*.1; do
		add 0644 "$f" "$prefix/share/man/man1/${f##*/}"
	done
	for p in cmfs replicad; do
		for f in "bin/completion/$p.bash" "bin/completion/_$p" "bin/completion/$p.fish"; do
			[ -s "$f" ] || { echo "install: $f is missing: run make completions" >&2; exit 1; }
		done
		add 0644 "bin/completion/$p.bash" "$prefix/share/bash-completion/completions/$p"
		add 0644 "bin/completion/_$p" "$prefix/share/zsh/site-functions/_$p"
		add 0644 "bin/completion/$p.fish" "$prefix/share/fish/vendor_completions.d/$p.fish"
	done
	# Units and the mount helper are optional: a tree without them installs
	# the rest. Units may name the installed programs as @BINDIR@ and
	# @SBINDIR@, replaced on the way in.
	for f in dist/systemd/*.service; do
		[ -e "$f" ] || continue
		add unit "$f" "$prefix/lib/systemd/system/${f##*/}"
	done
	if [ -e bin/mount.fuse.cmfs ]; then
		add 0755 bin/mount.fuse.cmfs "$prefix/sbin/mount.fuse.cmfs"
	fi
}

# made: directories this install created, in the order it made them.
made=()
makedir() {
	local d=$1 missing=()
	while [ "$d" != / ] && [ ! -d "$destdir$d" ]; do
		missing=("$d" "${missing[@]}")
		d=$(dirname "$d")
	done
	for d in "${missing[@]}"; do
		mkdir -m 0755 "$destdir$d"
		made+=("$d")
	done
}

do_install() {
	collect
	# A staging root is the packager's, not ours to record.
	if [ -n "$destdir" ]; then mkdir -p "$destdir"; fi
	local entry mode src dst kind path
	local -A wrote=()
	for entry in "${files[@]}"; do
		IFS=$'\t' read -r mode src dst <<<"$entry"
		makedir "$(dirname "$dst")"
		if [ "$mode" = unit ]; then
			# install(1) replaces the file by a new inode; so does this.
			sed -e "s|@BINDIR@|$prefix/bin|g" -e "s|@SBINDIR@|$prefix/sbin|g" "$src" >"$destdir$dst.tmp"
			chmod 0644 "$destdir$dst.tmp"
			mv -f "$destdir$dst.tmp" "$destdir$dst"
		else
			# install unlinks the old file first: a running cmfs keeps its inode.
			install -m "$mode" "$src" "$destdir$dst"
		fi
		echo "installed $destdir$dst"
		wrote[$dst]=1
	done
	makedir "$(dirname "$manifest")"
	local old=() dirs=()
	if [ -f "$destdir$manifest" ]; then
		while read -r kind path; do
			case $kind in
			f) [ -n "${wrote[$path]:-}" ] || { rm -f "$destdir$path"; echo "removed $destdir$path (installed before, not now)"; } ;;
			d) dirs+=("$path") ;;
			esac
		done <"$destdir$manifest"
	fi
	{
		for entry in "${files[@]}"; do
			IFS=$'\t' read -r mode src dst <<<"$entry"
			printf 'f %s\n' "$dst"
		done
		for path in "${dirs[@]}" "${made[@]}"; do
			printf 'd %s\n' "$path"
		done
	} >"$destdir$manifest.tmp"
	mv -f "$destdir$manifest.tmp" "$destdir$manifest"
	echo "installed $destdir$manifest (make uninstall PREFIX=$prefix removes what it lists)"
}

do_uninstall() {
	if [ ! -f "$destdir$manifest" ]; then
		echo "uninstall: nothing of cmfs is installed under $destdir$prefix ($destdir$manifest is missing)" >&2
		exit 1
	fi
	local kind path dirs=()
	while read -r kind path; do
		case $kind in
		f)
			if [ -e "$destdir$path" ] || [ -L "$destdir$path" ]; then
				rm -f "$destdir$path"
				echo "removed $destdir$path"
			fi
			;;
		d) dirs+=("$path") ;;
		esac
	done <"$destdir$manifest"
	rm -f "$destdir$manifest"
	echo "removed $destdir$manifest"
	# Deepest first; a directory that holds anything else stays.
	[ ${#dirs[@]} -gt 0 ] || return 0
	local d
	printf '%s\n' "${dirs[@]}" | awk '{ print length($0) "\t" $0 }' | sort -rn | cut -f2- |
		while IFS= read -r d; do
			if rmdir "$destdir$d" 2>/dev/null; then echo "removed $destdir$d/"; fi
		done
}

case ${1:-} in
install) do_install ;;
uninstall) do_uninstall ;;
*) echo "usage: PREFIX=DIR [DESTDIR=DIR] $0 install|uninstall" >&2; exit 2 ;;
esac
