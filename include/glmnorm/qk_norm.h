// QK-norm of a fused QKV buffer, optionally fused with GLM's partial RoPE.
//
// qkv is [tokens, (num_q_heads + num_k_heads + num_v_heads) * head_dim] (any
// row stride; heads contiguous inside a row). Each q head is RMS-normalised
// with q_gamma, each k head with k_gamma (both of length head_dim); v is
// neither read nor written. in and out may be the same buffer (in place).
//
// With rotary_dim > 0 the normalised q and k heads are then rotated, neox
// rotate-half style, over their first rotary_dim dims (GLM-4.5: head_dim/2):
//   a = h[i], b = h[i + rotary_dim/2], i < rotary_dim/2
//   out[i] = a*cos[i] - b*sin[i];  out[i + rotary_dim/2] = b*cos[i] + a*sin[i]
// where h is the normalised head as RmsNorm would store it (rounded to
// the output dtype), the rotation is computed in float32 and rounded once.
// cos and sin are f32 [positions, rotary_dim/2]; token t uses row
// positions[t] (or row t when positions is null).
#ifndef GLMNORM_QK_NORM_H_
#define GLMNORM_QK_NORM_H_

#include <cstdint>

#include "glmnorm/rms_norm.h"

namespace glmnorm {

struct QkHeads {
  int num_q_heads = 96;  // GLM-4.5
  int num_k_heads = 8;
  int num_v_heads = 8;
  int head_dim = 128;
};

struct Rope {
  int rotary_dim = 0;  // 0: no RoPE; else even and <= head_dim
  ConstTensorView cos;  // f32 [positions, rotary_dim/2]
  ConstTensorView sin;  // f32 [positions, rotary_dim/2]
  const int64_t* positions = nullptr;  // tokens entries, or null
};

// qkv_in and qkv_out: 2-D views [tokens, full QKV width] of the same dtype.
void QkNorm(const ConstTensorView& qkv_in, const TensorView& qkv_out, const QkHeads& heads,
            const ConstTensorView& q_gamma, const ConstTensorView& k_gamma,
            const NormOptions& options = {}, const Rope& rope = {});

}  // namespace glmnorm

#endif  // GLMNORM_QK_NORM_H_
