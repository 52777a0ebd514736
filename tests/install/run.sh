#!/usr/bin/env bash
# Installs the build in $1 into a fresh prefix, builds tests/install/consumer
# against it with CMake (find_package) and with pkg-config, and runs both.
set -euo pipefail
build=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
cmake -S "$root/tests/install/consumer" -B "$work/build" -G Ninja \
  -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/configure.log" || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/build" > "$work/build.log" || { cat "$work/build.log"; exit 1; }
"$work/build/consumer" "$root/tests/data/tiny_glm45"
libdir=$(ls -d "$work"/prefix/lib*/pkgconfig | head -1)
PKG_CONFIG_PATH="$libdir" c++ -std=c++20 "$root/tests/install/consumer/main.cc" \
  -o "$work/consumer_pc" $(PKG_CONFIG_PATH="$libdir" pkg-config --cflags --libs glmnorm)
"$work/consumer_pc" "$root/tests/data/tiny_glm45"
echo "install test: find_package and pkg-config consumers passed"
