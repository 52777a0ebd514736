#!/usr/bin/env bash
# Builds the libFuzzer targets (cmake preset "fuzz": clang, ASan + UBSan) and
# runs each for a bounded time, starting from the committed seed corpus.
#
#   bash scripts/fuzz.sh [SECONDS_PER_TARGET]      (default 60)
#
# New inputs libFuzzer finds go to fuzz-out/<target>/corpus (not committed);
# a crash is saved as fuzz-out/<target>/crash-* and fails this script. To
# replay one:  build/fuzz/fuzz/<target>_fuzzer fuzz-out/<target>/crash-...
set -euo pipefail

seconds="${1:-60}"
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || [[ "$seconds" -lt 1 ]]; then
  echo "usage: $0 [seconds per target, default 60]" >&2
  exit 2
fi
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
jobs="${JOBS:-$(nproc)}"

cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "$jobs" --target safetensors_fuzzer npy_fuzzer config_fuzzer index_fuzzer \
  gguf_fuzzer

declare -A dict=([safetensors]=safetensors.dict [npy]=npy.dict [config]=json.dict [index]=json.dict
                 [gguf]=gguf.dict)
status=0
for target in safetensors npy config index gguf; do
  out="fuzz-out/$target"
  mkdir -p "$out/corpus"
  echo "== $target: ${seconds}s"
  # The first corpus directory receives new inputs; the seeds stay read-only.
  if ! ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
      "build/fuzz/fuzz/${target}_fuzzer" \
      -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
      -dict="fuzz/${dict[$target]}" -artifact_prefix="$out/" -print_final_stats=1 \
      "$out/corpus" "fuzz/corpus/$target" 2>"$out/log.txt"; then
    echo "!! $target failed; see $out/log.txt and $out/crash-*" >&2
    tail -n 30 "$out/log.txt" >&2
    status=1
  fi
  grep -E "^stat::(number_of_executed_units|peak_rss_mb)|^Done|INFO: seed corpus" "$out/log.txt" || true
done
exit "$status"
