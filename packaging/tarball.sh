#!/usr/bin/env bash
# Writes the source tarball OUT (plateau_exporter-SRCVERSION.tar.gz) of the
# git work tree in the current directory, with `go mod vendor` output inside,
# so that rpmbuild can build it without network.
#
#   packaging/tarball.sh SRCVERSION OUT
#
# It copies the files git tracks, as they are in the work tree, to a
# temporary directory and vendors there: the work tree never gets a vendor/
# directory. Files that git does not track are left out (git add them
# first). The archive is reproducible: sorted names, numeric root owner and
# every mtime set to the HEAD commit's time.
set -euo pipefail

if [ $# -ne 2 ]; then
	echo "usage: $0 SRCVERSION OUT" >&2
	exit 2
fi
srcversion=$1
out=$2
name=plateau_exporter
go=${GO:-go}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
top=$name-$srcversion
dest=$tmp/$top
mkdir -p "$dest"

# Tracked files that still exist (a file deleted but not yet committed is
# gone from the work tree and must not break the copy).
while IFS= read -r -d '' f; do
	if [ -e "$f" ] || [ -L "$f" ]; then
		printf '%s\0' "$f"
	fi
done < <(git ls-files -z --cached) | tar --null -T - -cf - | tar -C "$dest" -xf -

(cd "$dest" && "$go" mod vendor) || {
	echo "tarball.sh: go mod vendor failed (are the modules in the cache? run go mod download)" >&2
	exit 1
}

mtime=$(git log -1 --format=%ct 2>/dev/null || date +%s)
mkdir -p "$(dirname "$out")"
tar -C "$tmp" --sort=name --owner=0 --group=0 --numeric-owner \
	--mtime="@$mtime" --format=gnu -cf - "$top" | gzip -9n >"$out.tmp"
mv "$out.tmp" "$out"
echo "wrote $out"
