#!/bin/sh
# Records every schema main has had, for migrations/history_test.go: for each
# distinct set of migration files a first-parent commit of main held (merges
# included: a merge can change the set without a diff to its first parent),
# the files (dialect, name, sha256 prefix) in migrations/testdata/history/
# states.txt, and each file version that is not today's in
# migrations/testdata/history/files/<name>@<sha>.sql (named by its content, so
# a version both dialects had is kept once).
#
# Run it, and commit what it writes, whenever a commit changes migrations/
# (the test fails until then if a migration was edited). Usage, from the
# repository root:  scripts/migration-history.sh [ref]   (default HEAD)
set -eu
ref=${1:-HEAD}
out=migrations/testdata/history
mkdir -p "$out/files"
states=$(mktemp)
trap 'rm -f "$states"' EXIT
seen=""
for c in $(git log --first-parent --format=%h "$ref"); do
	key=$(git ls-tree -r "$c" migrations/sqlite migrations/postgres | grep '\.sql$' | sha256sum | cut -c1-16)
	case " $seen " in *" $key "*) continue ;; esac
	seen="$seen $key"
	[ -n "$(git ls-tree "$c" migrations/sqlite/)" ] || continue
	for d in sqlite postgres; do
		for f in $(git ls-tree --name-only "$c" "migrations/$d/" | grep '\.sql$'); do
			name=$(basename "$f")
			sum=$(git show "$c:$f" | sha256sum | cut -c1-12)
			echo "$c $d $name $sum" >>"$states"
			if [ ! -f "migrations/$d/$name" ] || [ "$(sha256sum <"migrations/$d/$name" | cut -c1-12)" != "$sum" ]; then
				git show "$c:$f" >"$out/files/$name@$sum.sql"
			fi
		done
	done
done
{
	echo "# commit dialect file sha256[:12] — written by scripts/migration-history.sh"
	cat "$states"
} >"$out/states.txt"
