// The vocabulary of the per-op case tables (src/ops/<op>/<op>_cases.h): the
// dtype combinations the ops accept, GLM-4.5's shapes, and the token counts
// the benchmarks time. One table per op drives its tests, the cross-op tests
// (special values, output digests), `glmnorm bench` and the per-target
// micro-benchmark, so a new dtype or shape is added in one place.
#ifndef GLMNORM_SRC_OPS_CASES_H_
#define GLMNORM_SRC_OPS_CASES_H_

#include <cstdint>
#include <vector>

#include "glmnorm/base.h"
#include "glmnorm/qk_norm.h"

namespace glmnorm::cases {

// Input x (or residual), gamma and output dtypes of a norm, and its mode.
struct NormDTypes {
  DType x, w, y;
  Rounding rounding;
};

// The gammas the decoder-path ops accept with activations of dtype a: a's
// dtype, and f32 (once when a is f32).
inline std::vector<DType> GammaDTypes(DType a) {
  if (a == DType::kF32) return {DType::kF32};
  return {a, DType::kF32};
}

// The combinations every norm op accepts: x f32 / bf16 / f16; gamma f32 or
// x's dtype; y = Promote(gamma, x) in cast-then-scale mode, x's dtype in
// single rounding, and with `single_to_f32` also f32 from a 16-bit x.
inline std::vector<NormDTypes> CommonNormDTypes(bool single_to_f32) {
  std::vector<NormDTypes> combos;
  for (DType x : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (DType w : GammaDTypes(x)) {
      combos.push_back({x, w, Promote(w, x), Rounding::kCastThenScale});
      combos.push_back({x, w, x, Rounding::kSingle});
      if (single_to_f32 && x != DType::kF32) {
        combos.push_back({x, w, DType::kF32, Rounding::kSingle});
      }
    }
  }
  return combos;
}

// GLM-4.5's norm shapes: rows of `width` per token.
struct Shape {
  const char* name;
  int64_t rows_per_token;
  int64_t width;
};
inline constexpr Shape kHidden = {"hidden 5120 (GLM-4.5)", 1, 5120};
inline constexpr Shape kHiddenAir = {"hidden 4096 (GLM-4.5-Air)", 1, 4096};
inline constexpr Shape kQkHeads = {"96 q + 8 k heads of 128", 104, 128};

// GLM-4.5's attention heads (96 q, 8 k, 8 v of 128) and its partial RoPE
// (partial_rotary_factor 0.5: 64 of 128 dims).
inline constexpr QkHeads kGlm45Heads = {96, 8, 8, 128};
inline constexpr int kGlm45RotaryDim = 64;

// Tokens per call the benchmarks time: decode, a small batch, prefill.
inline constexpr int64_t kBenchTokens[] = {1, 16, 512, 4096};

}  // namespace glmnorm::cases

#endif  // GLMNORM_SRC_OPS_CASES_H_
