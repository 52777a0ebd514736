#!/usr/bin/env bash
# The ctest python_pytest when the build has no Python package: configured
# with GLMNORM_PYTHON=OFF (the venv of python/requirements.txt did not exist
# at configure time), or ON but something was missing (the reason is $2).
# Fails loudly; exit 77 ("not run") with GLMNORM_SKIP_PYTHON=1.
reqs="${1:-python/requirements.txt}"
why="${2:-}"
if [[ "${GLMNORM_SKIP_PYTHON:-0}" == 1 ]]; then
  echo "*** NOT RUN: the Python package tests (GLMNORM_SKIP_PYTHON=1)." >&2
  exit 77
fi
if [[ -n "$why" ]]; then
  echo "*** FAILED: the Python package glmnorm was not built: $why" >&2
  echo "*** Fix that and run \`make test\` again (GLMNORM_SKIP_PYTHON=1: reported as not run)." >&2
  exit 1
fi
cat >&2 <<MSG
*** FAILED: the Python package glmnorm was not built, so its pytest suite cannot run.
*** It needs the venv of $reqs (torch, transformers, nanobind...),
*** which did not exist when CMake configured this build. Create it with \`make pyenv\`
*** (needs network for pip; ~5 GB for torch), then \`make test\` again; or configure with
*** -DGLMNORM_PYTHON=ON -DPython_EXECUTABLE=<a python with those packages>;
*** or set GLMNORM_SKIP_PYTHON=1 to report this test as not run.
MSG
exit 1
