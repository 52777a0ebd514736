// QK-norm of a fused QKV buffer, optionally fused with GLM's partial RoPE.
//
// qkv is [..., (num_q_heads + num_k_heads + num_v_heads) * head_dim], rank 1
// to 4 ([tokens, W], [batch, seq, W], ...: the leading dims are the tokens and
// must address rows of one stride, any row stride; heads contiguous inside a
// row). Each q head is RMS-normalised
// with q_gamma, each k head with k_gamma (both of length head_dim); v is
// neither read nor written. in and out may be the same buffer (in place).
//
// With rotary_dim > 0 the normalised q and k heads are then rotated, neox
// rotate-half style, over their first rotary_dim dims (GLM-4.5: head_dim/2):
//   a = h[i], b = h[i + rotary_dim/2], i < rotary_dim/2
//   out[i] = a*cos[i] - b*sin[i];  out[i + rotary_dim/2] = b*cos[i] + a*sin[i]
// where h is the normalised head as RmsNorm would store it (rounded to
// the output dtype), the rotation is computed in float32 and rounded once.
// cos and sin are f32 [positions, rotary_dim/2] (any row stride). Token t
// uses the table row its position names: positions is i64 [tokens] (token t
// in the flattened order), or shaped like qkv's leading dims ([B, S] for
// [B, S, W]: Transformers' position_ids; a dim of 1 is broadcast, so [1, S]
// serves every sequence), any strides. Without positions (positions.rank ==
// 0) token t uses row t; that needs qkv to hold one sequence (leading dims
// [S] or [1, S]): [B, S] with B > 1 is an error, since row t of the
// flattened tokens is not the position within each sequence.
//
// Errors (glmnorm::Error, nothing written): bad heads, strides, gammas,
// dtypes or tables, a position out of range. 0 tokens is a no-op (null
// pointers allowed). Semantics: Transformers' Glm4MoeAttention applies
// q_norm / k_norm (Glm4MoeRMSNorm over head_dim) before apply_rotary_pos_emb
// with partial_rotary_factor 0.5 (docs/SPEC.md §3).
#ifndef GLMNORM_QK_NORM_H_
#define GLMNORM_QK_NORM_H_

#include <cstdint>

#include "glmnorm/base.h"
#include "glmnorm/execution.h"

namespace glmnorm {

struct QkHeads {
  int num_q_heads = 96;  // GLM-4.5
  int num_k_heads = 8;
  int num_v_heads = 8;
  int head_dim = 128;
};

// rotary_dim 0 with a table or positions given is an error (a forgotten
// rotary_dim), as is rotary_dim > 0 without both tables.
struct Rope {
  int rotary_dim = 0;  // 0: no RoPE (cos, sin, positions left empty); else even and <= head_dim
  ConstTensorView cos;  // f32 [positions, rotary_dim/2]
  ConstTensorView sin;  // f32 [positions, rotary_dim/2]
  ConstTensorView positions;  // i64 [tokens] or qkv's leading dims; rank 0 (default): row t
};

// qkv_in and qkv_out: views [..., full QKV width] of the same shape; tokens =
// the product of the leading dims (positions, if given, has that many values
// or their shape).
void QkNorm(const ConstTensorView& qkv_in, const TensorView& qkv_out, const QkHeads& heads,
            const ConstTensorView& q_gamma, const ConstTensorView& k_gamma,
            const NormOptions& options = {}, const Rope& rope = {},
            const Execution& execution = {});

}  // namespace glmnorm

#endif  // GLMNORM_QK_NORM_H_
