#!/usr/bin/env bash
# Runs the tests of the packaged `spanner-queues` crate: what `cargo package` put in
# target/package/spanner-queues-<version>.crate, not the workspace's sources. Run it after
# `cargo package -p spanner-queues-sql -p spanner-queues-macros -p spanner-queues`
# (CI's `cargo package` step makes all three).
#
# The three packages are unpacked side by side in a temporary directory. The SDK's manifest
# gets what its workspace gave it: `[patch.crates-io]` entries pointing at the unpacked macros
# and SQL packages (they are not published yet), the workspace's `[profile.*]` sections
# and a `[workspace]` table of its own. It is tested offline with the workspace's Cargo.lock,
# so the dependencies are the versions the workspace tests, and in the workspace's target
# directory (CARGO_TARGET_DIR), so dependencies built with the same features are reused.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
export CARGO_TARGET_DIR="$target"

version="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/Cargo.toml" | head -n 1)"
[[ -n "$version" ]] || { echo "packaged-tests: no workspace version in Cargo.toml" >&2; exit 1; }

work="$(mktemp -d "${TMPDIR:-/tmp}/spanner-queues-packaged.XXXXXX")"
trap 'rm -rf "$work"' EXIT

for name in spanner-queues-sql spanner-queues-macros spanner-queues; do
  crate="$target/package/$name-$version.crate"
  [[ -f "$crate" ]] || { echo "packaged-tests: $crate is missing: run cargo package first" >&2; exit 1; }
  tar -xzf "$crate" -C "$work"
done

sdk="$work/spanner-queues-$version"
{
  echo
  echo "[workspace]"
  echo
  echo "[patch.crates-io]"
  echo "spanner-queues-macros = { path = \"../spanner-queues-macros-$version\" }"
  echo "spanner-queues-sql = { path = \"../spanner-queues-sql-$version\" }"
  echo
  # The root manifest's [profile.*] sections, as they are.
  awk '/^\[/ { keep = ($0 ~ /^\[profile[.\]]/) } keep' "$root/Cargo.toml"
} >>"$sdk/Cargo.toml"
cp "$root/Cargo.lock" "$sdk/Cargo.lock"

(cd "$sdk" && cargo test --offline)

# The lock file cargo kept must name only versions the workspace's lock file names: the
# packaged crate was tested against the dependencies the workspace tests.
pairs() { awk '/^name = / { n = $3 } /^version = / { print n, $3 }' "$1" | sort -u; }
extra="$(comm -23 <(pairs "$sdk/Cargo.lock") <(pairs "$root/Cargo.lock"))"
if [[ -n "$extra" ]]; then
  echo "packaged-tests: the packaged crate resolved versions the workspace does not lock:" >&2
  echo "$extra" >&2
  exit 1
fi
