#!/usr/bin/env bash
# Builds the container image of the queue-aware emulator (default tag spanner-queues-emulator:local).
#
# Where the official emulator binaries are installed (Debian package
# google-cloud-cli-spanner-emulator), the image is FROM scratch: those binaries, the front, and
# their shared libraries. Nothing is pulled. Elsewhere it is based on the official emulator image
# (override with SPANNER_EMULATOR_BASE_IMAGE), which must then be pullable.
#
# Environment:
#   SPANNER_QUEUES_IMAGE       tag to build            [spanner-queues-emulator:local]
#   SPANNER_QUEUES_FRONT_BIN   front binary to package [built with cargo if unset]
#   SPANNER_EMULATOR_BIN_DIR   official emulator binaries [from `gcloud info`]
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
tag="${SPANNER_QUEUES_IMAGE:-spanner-queues-emulator:local}"
context="$here/context"

front="${SPANNER_QUEUES_FRONT_BIN:-}"
if [[ -z "$front" ]]; then
  (cd "$repo" && cargo build --quiet -p spanner-queues-emulator --bin spanner-queues-emulator)
  front="$(cd "$repo" && cargo metadata --format-version 1 --no-deps \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/debug/spanner-queues-emulator"
fi
[[ -x "$front" ]] || { echo "front binary not found: $front" >&2; exit 1; }

bindir="${SPANNER_EMULATOR_BIN_DIR:-}"
if [[ -z "$bindir" ]] && command -v gcloud >/dev/null 2>&1; then
  bindir="$(gcloud info --format='value(installation.sdk_root)' 2>/dev/null)/bin/cloud_spanner_emulator"
fi

rm -rf "$context"
mkdir -p "$context/rootfs/opt/spanner-queues" "$context/rootfs/tmp"
cp "$front" "$context/rootfs/opt/spanner-queues/spanner-queues-emulator"

# Copies a file into the rootfs at its host path (dereferencing symlinks).
stage() { mkdir -p "$context/rootfs$(dirname "$1")"; cp -L "$1" "$context/rootfs$1"; }

if [[ -n "$bindir" && -x "$bindir/emulator_main" && -x "$bindir/gateway_main" ]]; then
  echo "building $tag FROM scratch with the emulator binaries in $bindir" >&2
  for bin in emulator_main gateway_main; do
    cp "$bindir/$bin" "$context/rootfs/opt/spanner-queues/$bin"
  done
  for exe in "$front" "$bindir/emulator_main" "$bindir/gateway_main"; do
    # Every resolved library path, plus the dynamic loader (the line without "=>").
    ldd "$exe" | awk '/=> \// {print $3} /^\t\// {print $1}'
  done | sort -u | while read -r lib; do stage "$lib"; done
  # emulator_main loads time zones (America/Los_Angeles) at its first query.
  mkdir -p "$context/rootfs/usr/share"
  cp -rL /usr/share/zoneinfo "$context/rootfs/usr/share/zoneinfo"
  dockerfile="$here/Dockerfile"
  extra=()
else
  base="${SPANNER_EMULATOR_BASE_IMAGE:-gcr.io/cloud-spanner-emulator/emulator:latest}"
  echo "emulator binaries not installed here; building $tag FROM $base" >&2
  dockerfile="$here/Dockerfile.official"
  extra=(--build-arg "BASE_IMAGE=$base")
fi

build_id="$("$front" --build-id)"
docker build --quiet -f "$dockerfile" "${extra[@]}" --label "spanner-queues.build-id=$build_id" \
  -t "$tag" "$context" >/dev/null
rm -rf "$context"
echo "built $tag (front build id $build_id)" >&2
