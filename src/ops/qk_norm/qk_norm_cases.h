// QkNorm's case table: its dtype combinations, the head layouts its tests
// use, and the bytes a call moves.
#ifndef GLMNORM_SRC_OPS_QK_NORM_QK_NORM_CASES_H_
#define GLMNORM_SRC_OPS_QK_NORM_QK_NORM_CASES_H_

#include <cstdint>
#include <vector>

#include "ops/cases.h"

namespace glmnorm::cases {

// f32 gamma or the input's dtype; out = Promote (cast-then-scale), or the
// input's dtype or f32 (single rounding).
inline std::vector<NormDTypes> QkNormDTypes() { return CommonNormDTypes(/*single_to_f32=*/true); }

// GLM-4.5's layout, a small one, an odd head_dim, and no k heads.
// 1100: a head wider than the kernel's 1024-wide float32 copy of the gammas.
inline constexpr QkHeads kQkNormTestHeads[] = {
    kGlm45Heads, {4, 2, 2, 128}, {3, 1, 2, 7}, {2, 0, 1, 64}, {1, 1, 1, 1100}};

// Bytes one in-place call moves: the q and k heads read and written (v is
// not touched), the gammas read once; the RoPE tables stay in cache.
inline int64_t QkNormBytes(int64_t tokens, const QkHeads& h, DType in, DType w, DType out) {
  const int64_t qk = int64_t{h.num_q_heads + h.num_k_heads} * h.head_dim;
  return tokens * qk * int64_t(SizeOf(in) + SizeOf(out)) + 2 * h.head_dim * int64_t(SizeOf(w));
}

}  // namespace glmnorm::cases

#endif  // GLMNORM_SRC_OPS_QK_NORM_QK_NORM_CASES_H_
