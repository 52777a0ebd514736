#!/usr/bin/env bash
# Prints the path of a Python virtual environment holding the packages of a
# requirements file, creating it first if needed.
#
#   scripts/python_env.sh [--no-install] REQUIREMENTS_FILE
#
# The venv lives outside the clone, in
#   ${XDG_CACHE_HOME:-~/.cache}/glmnorm/venv-<first 12 hex of sha256(REQUIREMENTS_FILE)>
# so every clone and worktree shares it, and editing the requirements makes a
# new one. It is built under a lock and marked complete only after
# `pip install` succeeds, so a failed or concurrent run never leaves a
# half-installed venv that looks usable. With --no-install it only looks:
# exit status 3 when the venv is missing (the tests use this; they never
# install). Messages go to stderr, the path alone to stdout.
set -euo pipefail

install=1
if [[ "${1:-}" == "--no-install" ]]; then
  install=0
  shift
fi
if [[ $# -ne 1 || ! -f "$1" ]]; then
  echo "usage: $0 [--no-install] REQUIREMENTS_FILE" >&2
  exit 2
fi
reqs="$1"

hash=$(sha256sum "$reqs" | cut -c1-12)
cache="${XDG_CACHE_HOME:-$HOME/.cache}/glmnorm"
venv="$cache/venv-$hash"
done_marker="$venv/.glmnorm-complete"

if [[ -f "$done_marker" ]]; then
  echo "$venv"
  exit 0
fi
if [[ $install -eq 0 ]]; then
  echo "python_env: no venv for $reqs at $venv (run: make pyenv, or bash $0 $reqs)" >&2
  exit 3
fi

mkdir -p "$cache"
exec 9>"$venv.lock"
flock 9
if [[ ! -f "$done_marker" ]]; then  # another process may have built it meanwhile
  rm -rf "$venv"
  echo "python_env: creating $venv from $reqs" >&2
  if ! python3 -m venv "$venv" >&2 ||
     ! "$venv/bin/python" -m pip install --disable-pip-version-check -q -r "$reqs" >&2; then
    rm -rf "$venv"
    echo "python_env: FAILED to create $venv (python3-venv installed? network for pip?)" >&2
    exit 1
  fi
  cp "$reqs" "$venv/requirements.txt"
  touch "$done_marker"
fi
echo "$venv"
