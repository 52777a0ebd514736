#!/usr/bin/env bash
# `make demo`: build the glmnorm tool (quietly: the compiler's output goes to a
# log, shown only if the build fails), then show it doing its job on the tiny
# GLM-4.5 checkpoint that Transformers saved (tests/data/tiny_glm45, made by
# scripts/make_tiny_checkpoint.py):
#   1. glmnorm inspect   every RMSNorm of the checkpoint, checked
#   2. glmnorm check     those norms applied to the activations recorded beside
#                        the checkpoint, compared bit for bit with the outputs
#                        Transformers' Glm4MoeRMSNorm produced
#   3. glmnorm inspect / diff   the same checkpoint converted to GGUF by llama.cpp's
#                        gguf package, compared norm by norm with the original
#   4. glmnorm bench --quick   a few GLM-4.5 shapes against the speed of a copy
# The full benchmark is `make bench`.
set -euo pipefail
cd "$(dirname "$0")/.."

JOBS=${JOBS:-$(nproc)}
BUILD=build/release
BIN=$BUILD/tools/glmnorm
CKPT=tests/data/tiny_glm45
LOG=$BUILD/demo-build.log
start=$SECONDS

# ---- 1. build, quietly, with a progress counter
echo "building glmnorm (Release)..."
mkdir -p "$BUILD"
(cmake --preset release && cmake --build --preset release -j "$JOBS" --target glmnorm_cli) \
  >"$LOG" 2>&1 &
build_pid=$!
last_report=$SECONDS
while kill -0 "$build_pid" 2>/dev/null; do
  sleep 1
  # Ninja's "[done/total]" counter, from the last line that has one.
  steps=$(grep -o '^\[[0-9]*/[0-9]*\]' "$LOG" 2>/dev/null | tail -n 1 || true)
  [ -n "$steps" ] || continue
  steps=${steps#[}
  steps=${steps%]}
  if [ -t 1 ]; then
    printf '\r  compile step %s of %s, %ds ' "${steps%/*}" "${steps#*/}" $((SECONDS - start))
  elif ((SECONDS - last_report >= 30)); then
    echo "  compile step ${steps%/*} of ${steps#*/}, $((SECONDS - start))s"
    last_report=$SECONDS
  fi
done
status=0
wait "$build_pid" || status=$?
[ -t 1 ] && printf '\r%60s\r' ''
if ((status != 0)); then
  echo "the build failed (exit $status); its log, $LOG:" >&2
  cat "$LOG" >&2
  exit "$status"
fi
echo "built $BIN in $((SECONDS - start))s (compiler output: $LOG)"

step() {  # step TITLE EXPLANATION COMMAND...
  local title=$1 explain=$2
  shift 2
  printf '\n==== %s\n%s\n\n$ %s\n' "$title" "$explain" "$*"
  "$@"
}

# ---- 2. the library's main job, on a checkpoint saved by Transformers
step "1/4  inspect: the RMSNorms of a (tiny) GLM-4.5 checkpoint" \
  "$CKPT was saved by Transformers' Glm4MoeForCausalLM (random weights, GLM-4.5's layout:
sharded safetensors, QK-norm, an MTP layer). glmnorm finds and checks every norm, mapping only
the shards that hold one." \
  "$BIN" inspect "$CKPT"

step "2/4  check: those norms applied to real activations, against Transformers" \
  "Beside the checkpoint, goldens.safetensors holds activations and the outputs Transformers'
Glm4MoeRMSNorm produced from them (and one residual stream through every decoder layer).
glmnorm recomputes each with the checkpoint's gamma and eps and compares the bits." \
  "$BIN" check "$CKPT"

# ---- 3. the same norms in llama.cpp's format
GGUF=tests/data/tiny_glm45_gguf
step "3/4  GGUF: inspect and diff a llama.cpp conversion" \
  "$GGUF/tiny_glm45.gguf is $CKPT converted by llama.cpp's own gguf package
(scripts/make_tiny_gguf.py: glm4moe names, norms F32, weights Q8_0). glmnorm reads the norms
under llama.cpp's names, then diff matches them with the safetensors ones bit for bit (as
float32) and compares eps; then a copy with eps 1e-6 and one gain 1 ulp up (exit 1)." \
  "$BIN" inspect "$GGUF/tiny_glm45.gguf"
printf '\n$ %s\n' "$BIN diff $CKPT $GGUF/tiny_glm45.gguf"
"$BIN" diff "$CKPT" "$GGUF/tiny_glm45.gguf"
for bad in eps_1e-6 one_ulp; do
  printf '\n$ %s\n' "$BIN diff $CKPT $GGUF/broken/$bad.gguf"
  status=0
  "$BIN" diff "$CKPT" "$GGUF/broken/$bad.gguf" || status=$?
  ((status == 1)) || { echo "expected exit 1 (differences), got $status" >&2; exit 1; }
  echo "(exit $status: differences found)"
done

# ---- 4. how fast
step "4/4  bench --quick: a few GLM-4.5 shapes (bf16)" \
  "of_copy = the kernel's GB/s (bytes it must read and write) / the GB/s of a plain copy of as
many bytes, timed in the same run (the faster of memcpy and a streaming-store copy; the copy
column says which): 1.00 is the speed of light. of_streams: the same against a pass moving the
kernel's own streams (or the copy, if faster). max_ulp: error against a float64
reference (a dash: not checked for that kernel). The full table (every kernel, bf16/f16/f32,
1 to 4096 tokens): make bench." \
  "$BIN" bench --quick

printf '\ndemo done in %ds. Next: make test; make bench; %s --help\n' $((SECONDS - start)) "$BIN"
