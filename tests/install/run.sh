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

# Every ```cpp block of the README is a whole program: built against the
# installed package with pkg-config and run (it must exit 0).
mkdir -p "$work/readme"
python3 - "$root/README.md" "$work/readme" <<'PY'
import re, sys
blocks = re.findall(r"```cpp\n(.*?)```", open(sys.argv[1]).read(), re.S)
assert blocks, "README.md has no ```cpp block"
for i, block in enumerate(blocks):
    open(f"{sys.argv[2]}/example_{i}.cc", "w").write(block)
PY
for src in "$work"/readme/example_*.cc; do
  PKG_CONFIG_PATH="$libdir" c++ -std=c++20 -Wall -Werror "$src" -o "${src%.cc}" \
    $(PKG_CONFIG_PATH="$libdir" pkg-config --cflags --libs glmnorm) ||
    { echo "README C++ example $(basename "$src") does not build"; exit 1; }
  rc=0; "${src%.cc}" || rc=$?
  [ "$rc" = 0 ] || { echo "README C++ example $(basename "$src") exited $rc"; exit 1; }
done
echo "install test: $(ls "$work"/readme/example_*.cc | wc -l) README C++ examples built and ran"
