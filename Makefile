# The commands a user runs. Everything else is CMake (see CMakePresets.json).
#   make demo   install what is missing, build the tool (Release, quietly),
#               inspect the bundled tiny GLM-4.5 checkpoint, check its norms
#               bit for bit against Transformers, then a short benchmark
#               (scripts/demo.sh)
#   make test   install what is missing, build, run every test, then again
#               under AddressSanitizer + UndefinedBehaviorSanitizer
#   make bench  the full benchmark (all kernels, longer sampling)
#   make fuzz   build the libFuzzer targets with clang and run each a while

SHELL := /bin/bash
JOBS ?= $(shell nproc)
BIN := build/release/tools/glmnorm

# Debian packages the build needs, and why:
#   libhwy-dev          Google Highway: portable SIMD with runtime dispatch
#   libgtest-dev, libgmock-dev  the tests
#   libbenchmark-dev    Google Benchmark (bench/ micro-benchmarks)
#   libcli11-dev        argument parsing of the glmnorm tool
#   nlohmann-json3-dev  safetensors headers, shard index, config.json
DEB_PACKAGES := cmake ninja-build g++ make libhwy-dev libgtest-dev libgmock-dev \
                libbenchmark-dev libcli11-dev nlohmann-json3-dev

.PHONY: deps build demo test test-release test-asan bench fuzz clean

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
	cmake --preset release
	cmake --build --preset release -j $(JOBS)

demo: deps
	@JOBS=$(JOBS) bash scripts/demo.sh

test-release: build
	ctest --preset release -j $(JOBS)

test-asan: deps
	cmake --preset asan
	cmake --build --preset asan -j $(JOBS)
	ctest --preset asan -j $(JOBS)

test: test-release test-asan

bench: build
	$(BIN) bench --min-time 1 --dtype bf16 f16 f32
	build/release/bench/targets_bench --benchmark_min_time=0.2

fuzz: deps
	@dpkg-query -W -f='$${Status}' clang 2>/dev/null | grep -q "install ok installed" || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang)
	bash scripts/fuzz.sh

clean:
	rm -rf build
