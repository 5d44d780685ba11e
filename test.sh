#!/usr/bin/env bash
# The one test command (README, .ci/run): installs into .tools/ whatever the tests need and is
# missing, then runs every check and test. Safe to re-run; a fresh machine needs only cargo.
set -euo pipefail
cd "$(dirname "$0")"

# What the tests need, installed into .tools/ by the installer the main job uses too.
scripts/install-tools.sh
export PATH="$PWD/.tools/bin:$PATH"
export BPRUN_TEST_BAO="$PWD/.tools/bin/bao"

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy -j2 --workspace --all-targets --quiet -- -D warnings
echo "== cargo test"
cargo test -j2 --workspace --quiet "$@"
