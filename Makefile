# The commands a user runs. Everything else is CMake (see CMakePresets.json).
#   make demo   install what is missing, build the tool (Release, quietly),
#               inspect the bundled tiny GLM-4.5 checkpoint, check its norms
#               bit for bit against Transformers, then a short benchmark
#               (scripts/demo.sh)
#   make test   install what is missing, build and run every test under
#               AddressSanitizer + UndefinedBehaviorSanitizer, then the Release
#               build's tests (scripts/make_test.sh: the order, the timings)
#   make bench  the full benchmark (all kernels, longer sampling)
#   make fuzz   build the libFuzzer targets with clang and run each a while
#   make compare  glmnorm against PyTorch, Transformers, torch.compile and ONNX
#               Runtime on GLM-4.5 shapes, in one run (bench/compare_peers.py)
#   make pyenv  create the cached Python venvs of the parity test and of the
#               Python package's tests (needs pip's network; torch is ~5 GB)

SHELL := /bin/bash
JOBS ?= $(shell nproc)
BIN := build/release/tools/glmnorm

# Debian packages the build needs, and why:
#   libhwy-dev          Google Highway: portable SIMD with runtime dispatch
#   libgtest-dev, libgmock-dev  the tests
#   libbenchmark-dev    Google Benchmark (bench/ micro-benchmarks)
#   libcli11-dev        argument parsing of the glmnorm tool
#   nlohmann-json3-dev  safetensors headers, shard index, config.json
#   pkg-config          the install test builds a consumer through glmnorm.pc
#   python3-dev, python3-venv  the Python package's extension (headers) and the
#                       cached venvs of the Python tests
DEB_PACKAGES := cmake ninja-build g++ make libhwy-dev libgtest-dev libgmock-dev \
                libbenchmark-dev libcli11-dev nlohmann-json3-dev pkg-config \
                python3-dev python3-venv

# The Python packages of the safetensors parity test (ctest safetensors_parity).
# scripts/python_env.sh keeps their venv outside the clone, in
# ~/.cache/glmnorm/venv-<hash of the file>, shared by clones and worktrees.
PARITY_REQUIREMENTS := tests/requirements-parity.txt
# The Python package (python/, issue 10): its build tools and test packages.
# When their venv exists, the release build also builds the extension with
# that python and ctest runs the pytest suite (python_pytest); without it the
# C++ tests still run and python_pytest FAILS with the reason.
PY_REQUIREMENTS := python/requirements.txt
PY_VENV = $(shell bash scripts/python_env.sh --no-install $(PY_REQUIREMENTS) 2>/dev/null)
PY_CMAKE_ARGS = $(if $(PY_VENV),-DGLMNORM_PYTHON=ON -DPython_EXECUTABLE=$(PY_VENV)/bin/python,-DGLMNORM_PYTHON=OFF)

.PHONY: deps build demo test test-release test-asan bench compare fuzz clean pyenv pyenv-or-warn \
        pyenv-parity-or-warn

deps:
	@missing=""; for p in $(DEB_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "Installing:$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

build: deps
	cmake --preset release $(PY_CMAKE_ARGS)
	cmake --build --preset release -j $(JOBS)

demo: deps
	@JOBS=$(JOBS) bash scripts/demo.sh

pyenv:
	@bash scripts/python_env.sh $(PARITY_REQUIREMENTS)
	@bash scripts/python_env.sh $(PY_REQUIREMENTS)

# For the test targets: without the venvs (no network for pip) the C++ tests
# must still run; ctest then reports safetensors_parity, gguf_parity and python_pytest as
# FAILED with the reason (or as not run with GLMNORM_SKIP_PYTHON=1), so say
# so here too. The sanitizer build needs only the parity venv.
pyenv-parity-or-warn:
	@if [ "$${GLMNORM_SKIP_PYTHON:-0}" != 1 ]; then \
	  bash scripts/python_env.sh $(PARITY_REQUIREMENTS) >/dev/null || \
	  echo "*** make pyenv failed: the Python parity tests will FAIL (GLMNORM_SKIP_PYTHON=1 skips them)" >&2; \
	fi

pyenv-or-warn: pyenv-parity-or-warn
	@if [ "$${GLMNORM_SKIP_PYTHON:-0}" != 1 ]; then \
	  bash scripts/python_env.sh $(PY_REQUIREMENTS) >/dev/null || \
	  echo "*** make pyenv failed for $(PY_REQUIREMENTS): the Python package is not built and its tests (python_pytest) will FAIL (GLMNORM_SKIP_PYTHON=1 skips them)" >&2; \
	fi

# pyenv-or-warn first: the release build builds the Python package when its venv exists.
test-release: deps pyenv-or-warn build
	ctest --preset release -j $(JOBS)

test-asan: deps pyenv-parity-or-warn
	cmake --preset asan
	cmake --build --preset asan -j $(JOBS)
	ctest --preset asan -j $(JOBS)

# Both builds' tests run even when the first has a failure; the status fails
# if either did. The script overlaps the Python venv's download with the
# sanitizer build and prints how long each phase took.
test:
	@bash scripts/make_test.sh

bench: build
	$(BIN) bench --min-time 1 --dtype bf16 f16 f32
	build/release/bench/targets_bench --benchmark_min_time=0.2

# The peers need the Python venv (torch, transformers, onnxruntime) and the
# extension built with it; COMPARE_ARGS passes options (e.g. --quick).
compare: pyenv
	$(MAKE) --no-print-directory build
	PYTHONPATH=build/release/python $(PY_VENV)/bin/python bench/compare_peers.py $(COMPARE_ARGS)

fuzz: deps
	@dpkg-query -W -f='$${Status}' clang 2>/dev/null | grep -q "install ok installed" || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang)
	bash scripts/fuzz.sh

clean:
	rm -rf build
