#!/usr/bin/env bash
# Builds the release archives of checkpointd: a static binary for
# linux/amd64 and linux/arm64 (pure Go, CGO_ENABLED=0), each in
# checkpointd_VERSION_linux_ARCH.tar.gz with the README, the docs and what
# an operator installs (deploy/), plus SHA256SUMS over the archives, and
# the context the container image is built from (dist/image, see
# deploy/container/Containerfile).
#
#   scripts/release.sh v1.4.0            # into ./dist
#   DIST=/tmp/out scripts/release.sh v1.4.0
#   ARCHES="amd64" scripts/release.sh v1.4.0
#
# The version and the commit are stamped with -ldflags, so `checkpointd
# version` and checkpointd_build_info name them whatever GOFLAGS says
# (-buildvcs=false included). A tree with uncommitted changes is refused
# unless ALLOW_DIRTY=1: a release is a commit.
set -euo pipefail
cd "$(dirname "$0")/.."

version="${1:?usage: scripts/release.sh VERSION (e.g. v1.4.0)}"
case "$version" in
  v[0-9]*) ;;
  *) echo "release: VERSION must look like v1.4.0, not $version" >&2; exit 2 ;;
esac
dist="${DIST:-dist}"
arches="${ARCHES:-amd64 arm64}"

revision="$(git rev-parse HEAD)"
if [ -n "$(git status --porcelain)" ] && [ "${ALLOW_DIRTY:-}" != 1 ]; then
  echo "release: the tree has uncommitted changes; commit them (or ALLOW_DIRTY=1 for a trial build)" >&2
  exit 1
fi
# The commit time, for reproducible archives: the same commit gives the
# same bytes.
epoch="$(git log -1 --format=%ct HEAD)"

# dist is emptied first: refuse a DIST that is not a folder of its own.
case "$(realpath -m -- "$dist")" in
  /|"$HOME"|"$PWD") echo "release: DIST=$dist would empty $dist: name a folder for the release alone" >&2; exit 2 ;;
esac
rm -rf "$dist"
mkdir -p "$dist"
for arch in $arches; do
  name="checkpointd_${version}_linux_${arch}"
  stage="$dist/$name"
  mkdir -p "$stage"
  echo "release: building $name"
  CGO_ENABLED=0 GOOS=linux GOARCH="$arch" go build -trimpath \
    -ldflags "-s -w -X main.releaseVersion=$version -X main.releaseRevision=$revision" \
    -o "$stage/checkpointd" ./cmd/checkpointd
  cp README.md "$stage/"
  cp -R docs deploy "$stage/"
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" \
    -C "$dist" -czf "$dist/$name.tar.gz" "$name"
  # The image's binary, by the architecture buildah and podman name
  # (TARGETARCH).
  mkdir -p "$dist/image/$arch"
  cp "$stage/checkpointd" "$dist/image/$arch/checkpointd"
  rm -rf "$stage"
done

# What FROM scratch lacks: the CA certificates for HTTPS to the forge, and
# the data directory, owned by the image's user (COPY --chown), so a fresh
# volume is writable by it.
certs=/etc/ssl/certs/ca-certificates.crt
[ -r "$certs" ] || { echo "release: $certs is missing (Debian: apt-get install ca-certificates)" >&2; exit 1; }
cp "$certs" "$dist/image/ca-certificates.crt"
mkdir -p "$dist/image/data"

(cd "$dist" && sha256sum -- *.tar.gz > SHA256SUMS)
echo "release: $(cd "$dist" && ls -- *.tar.gz SHA256SUMS | tr '\n' ' ')in $dist"
