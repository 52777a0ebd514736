#!/usr/bin/env bash
# Runs a Python test script in the cached venv of a requirements file
# (scripts/python_env.sh); ctest calls this, and it never installs anything.
#
#   scripts/python_test.sh REQUIREMENTS_FILE SCRIPT [ARGS...]
#
# Python from $GLMNORM_PYTHON if set (an environment of your own), else the
# venv that `make pyenv` made. Without either the test FAILS with a message
# saying how to get one, unless GLMNORM_SKIP_PYTHON=1: then it exits 77,
# which ctest reports as "Skipped" (SKIP_RETURN_CODE) and lists under
# "The following tests did not run".
set -uo pipefail

if [[ $# -lt 2 ]]; then
  echo "usage: $0 REQUIREMENTS_FILE SCRIPT [ARGS...]" >&2
  exit 2
fi
reqs="$1"
shift
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

if [[ -n "${GLMNORM_PYTHON:-}" ]]; then
  python="$GLMNORM_PYTHON"
elif venv="$(bash "$here/python_env.sh" --no-install "$reqs" 2>/dev/null)"; then
  python="$venv/bin/python"
elif [[ "${GLMNORM_SKIP_PYTHON:-0}" == 1 ]]; then
  echo "*** NOT RUN: $(basename "$1") needs the Python packages of $reqs;" \
       "skipped because GLMNORM_SKIP_PYTHON=1." >&2
  exit 77
else
  cat >&2 <<MSG
*** FAILED: $(basename "$1") needs the Python packages of
***   $reqs
*** and their venv does not exist. Create it with \`make pyenv\` (needs network for pip),
*** point GLMNORM_PYTHON at a python that has them, or set GLMNORM_SKIP_PYTHON=1 to
*** skip this test (it is then reported as not run).
MSG
  exit 1
fi
exec "$python" "$@"
