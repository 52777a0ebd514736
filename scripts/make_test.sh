#!/usr/bin/env bash
# `make test` (and CI): both builds' tests, in the order that keeps the wall
# time short on a 2-core machine with a fresh cache:
#   1. the small venv of the parity tests (seconds);
#   2. the big venv of the Python package (torch: ~3 GB to download, ~4 GB
#      to unpack) starts in the background: it waits on the network, not on
#      the CPUs, so it overlaps
#   3. the AddressSanitizer + UBSan build and its tests, which need no torch;
#   4. then, with the venv ready, the Release build (kernels, CLI, Python
#      extension) and its tests, pytest included.
# Both builds' tests run even when the first has a failure; the exit status
# fails if either did. Each phase prints its start and its duration, so a
# slow CI log says where the time went. GLMNORM_SKIP_PYTHON=1 skips the venvs
# (the Python tests are then reported as not run).
set -uo pipefail
cd "$(dirname "$0")/.."
make_() { make --no-print-directory "$@"; }

t0=$SECONDS
phase_start=$SECONDS
summary=()
phase() {  # phase NAME: ends the previous phase, starts NAME
  if [[ -n "${phase_name:-}" ]]; then
    summary+=("$phase_name $((SECONDS - phase_start))s")
  fi
  phase_name="$1"
  phase_start=$SECONDS
  [[ -n "$1" ]] && echo "=== make test +$((SECONDS - t0))s: $1" >&2
  return 0
}

status=0
phase "Debian packages"
make_ deps || exit 1

pyenv_pid=""
if [[ "${GLMNORM_SKIP_PYTHON:-0}" != 1 ]]; then
  phase "parity venv"
  make_ pyenv-parity-or-warn
  mkdir -p build
  echo "=== make test: the Python package's venv is being created in the background" \
       "(log: build/pyenv.log)" >&2
  bash scripts/python_env.sh python/requirements.txt >build/pyenv.log 2>&1 &
  pyenv_pid=$!
fi

phase "ASan + UBSan build and tests"
make_ test-asan || status=1

if [[ -n "$pyenv_pid" ]]; then
  phase "waiting for the Python venv"
  wait "$pyenv_pid" || tail -n 20 build/pyenv.log >&2  # test-release says what it means
fi

phase "Release build and tests"
make_ test-release || status=1
phase ""

joined=$(printf '%s; ' "${summary[@]}")
echo "=== make test: $([[ $status == 0 ]] && echo passed || echo FAILED) in" \
     "$((SECONDS - t0))s (${joined%; })" >&2
exit $status
