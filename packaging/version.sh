#!/bin/sh
# Prints the RPM Version and Release of the source tree in the current
# directory, separated by a space, from `git describe --tags --always`.
#
# RPM versions cannot contain '-', and snapshots must sort between releases,
# so the describe string is split:
#   v1.2.3                 -> 1.2.3 1             (a release)
#   v1.2.3-5-gabc1234      -> 1.2.3 1.5.gabc1234  (5 commits after it: newer
#                                                 than 1.2.3-1, older than 1.2.4)
#   v1.3.0-rc.1            -> 1.3.0~rc.1 1        ('~' sorts before 1.3.0)
#   abc1234 (no tag)       -> 0.0.0 0.42.gabc1234 (42 = commits in HEAD, so
#                                                 later snapshots sort higher)
#   any of these + -dirty  -> release gets .dirty
# The caret (1.2.3^5) would say "snapshot" more directly, but EL8's rpm 4.14
# does not understand it.
set -eu

if ! desc=$(git describe --tags --always --dirty 2>/dev/null); then
	echo "version.sh: not a git work tree, cannot tell the version" >&2
	exit 1
fi

dirty=
case $desc in
*-dirty)
	dirty=.dirty
	desc=${desc%-dirty}
	;;
esac

# A tagged describe ends in -<commits>-g<hash>; split that off first, since
# the tag itself may contain '-' (v1.3.0-rc.1).
if printf '%s\n' "$desc" | grep -Eq -- '-[0-9]+-g[0-9a-f]+$'; then
	hash=${desc##*-g}
	rest=${desc%-g*}
	commits=${rest##*-}
	tag=${rest%-*}
	release=1.$commits.g$hash
elif git rev-parse -q --verify "refs/tags/$desc" >/dev/null 2>&1; then
	tag=$desc
	release=1
else
	# No tag reachable: describe printed the abbreviated commit.
	tag=
	commits=$(git rev-list --count HEAD)
	release=0.$commits.g$desc
fi

if [ -z "$tag" ]; then
	version=0.0.0
else
	version=${tag#v}
	# '-' introduces a pre-release in semver and must sort before the
	# release ('~'); any other character RPM rejects becomes '_'.
	version=$(printf '%s' "$version" | tr '-' '~' | tr -c 'A-Za-z0-9._+~' '_')
fi

printf '%s %s%s\n' "$version" "$release" "$dirty"
