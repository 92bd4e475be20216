#!/usr/bin/env bash
# Builds and tests every publishable crate from its package: what `cargo package` put in
# target/package/<name>-<version>.crate, not the workspace's sources, so that a published crate
# cannot depend on a file outside it. Run it after `cargo package` of the crates below (CI's
# `cargo package` step makes them all).
#
# First it checks each package's manifest: the workspace's version and the metadata crates.io
# shows (description, license, repository, readme, keywords, categories, rust-version).
#
# Then the packages are unpacked side by side in a temporary directory and made the members of a
# workspace of their own, with what the real workspace gives them: `[patch.crates-io]` entries
# pointing each crate's dependencies on the others at the unpacked packages (they are not
# published yet), the root manifest's `[profile.*]` sections and `.cargo/config.toml`. One
# `cargo test --workspace` there builds every package's library, binaries and tests and runs
# them (the emulator's package holds no integration tests: they need the testing crate, which
# depends on the emulator, so they stay in the repository). It runs offline with the workspace's
# Cargo.lock, so the dependencies are the versions the workspace tests, and in the workspace's
# target directory (CARGO_TARGET_DIR), so dependencies built with the same features are reused.
set -euo pipefail

# The publishable crates, in dependency order.
packages=(
  spanner-queues-sql
  spanner-queues-macros
  spanner-queues
  spanner-queues-emulator
  spanner-queues-testing
  spanner-queues-cli
)
# What every package's manifest must say, besides its version.
required=(description license repository readme keywords categories rust-version)

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
export CARGO_TARGET_DIR="$target"

version="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/Cargo.toml" | head -n 1)"
[[ -n "$version" ]] || { echo "packaged-tests: no workspace version in Cargo.toml" >&2; exit 1; }

work="$(mktemp -d "${TMPDIR:-/tmp}/spanner-queues-packaged.XXXXXX")"
trap 'rm -rf "$work"' EXIT

problems=()
for name in "${packages[@]}"; do
  crate="$target/package/$name-$version.crate"
  [[ -f "$crate" ]] || { echo "packaged-tests: $crate is missing: run cargo package first" >&2; exit 1; }
  tar -xzf "$crate" -C "$work"
  # The [package] table of the normalized manifest, one `key = value` a line.
  manifest="$work/$name-$version/Cargo.toml"
  package="$(awk '/^\[/ { keep = ($0 == "[package]") } keep' "$manifest")"
  for key in "${required[@]}"; do
    grep -q "^$key = " <<<"$package" || problems+=("$name: no $key in its package manifest")
  done
  grep -q "^version = \"$version\"$" <<<"$package" || problems+=("$name: not at version $version")
done
if ((${#problems[@]})); then
  printf 'packaged-tests: %s\n' "${problems[@]}" >&2
  exit 1
fi

{
  echo "[workspace]"
  echo "resolver = \"3\""
  echo "members = ["
  for name in "${packages[@]}"; do echo "  \"$name-$version\","; done
  echo "]"
  echo
  echo "[patch.crates-io]"
  for name in "${packages[@]}"; do echo "$name = { path = \"$name-$version\" }"; done
  echo
  # The root manifest's [profile.*] sections, as they are.
  awk '/^\[/ { keep = ($0 ~ /^\[profile[.\]]/) } keep' "$root/Cargo.toml"
} >"$work/Cargo.toml"
cp "$root/Cargo.lock" "$work/Cargo.lock"
if [[ -d "$root/.cargo" ]]; then cp -r "$root/.cargo" "$work/.cargo"; fi

(cd "$work" && cargo test --offline --workspace)

# The lock file cargo kept must name only versions the workspace's lock file names: the
# packaged crates were tested against the dependencies the workspace tests.
pairs() { awk '/^name = / { n = $3 } /^version = / { print n, $3 }' "$1" | sort -u; }
extra="$(comm -23 <(pairs "$work/Cargo.lock") <(pairs "$root/Cargo.lock"))"
if [[ -n "$extra" ]]; then
  echo "packaged-tests: the packaged crates resolved versions the workspace does not lock:" >&2
  echo "$extra" >&2
  exit 1
fi
