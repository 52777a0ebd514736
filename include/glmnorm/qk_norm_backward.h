// The backward pass of QkNorm (qk_norm.h), without and with RoPE: the q heads and the k
// heads of a fused QKV gradient, each head a row of RmsNormBackward
// (rms_norm_backward.h) with its own gamma, one dgamma for q and one for k.
//
// qkv:       the forward's input [..., (nq + nk + nv) * head_dim], rank 1..4 with
//            leading dims forming rows (as QkNorm), any row stride
// dqkv_out:  gradient of the forward's output, same layout and dtype (its q and
//            k columns are read; its dtype is the forward's output dtype, so
//            Promote(gamma, qkv) in cast-then-scale mode)
// dqkv_in:   gradient of the forward's input: its q and k columns are written
//            in qkv's dtype; v columns are neither read nor written (the
//            forward passes v through: its gradient is dqkv_out's v columns,
//            already in place when dqkv_in is dqkv_out). May be dqkv_out.
// dq_gamma, dk_gamma: 1-D [head_dim] outputs, f32 / bf16 / f16.
// Deterministic like RmsNormBackward (rows = tokens * heads, in token-major
// order).
//
// With RoPE (the second overload, rope.rotary_dim > 0: the forward's Rope,
// same checks): dqkv_out is the gradient of the ROTATED heads; each head is
// rotated back (the transposed rotation: exact float64 products, one rounded
// sum, then float32 and dqkv_out's dtype) as the norm's backward reads it.
// Heads wider than 1024 values are rotated back first, into a per-thread
// buffer of tokens * (nq + nk) * head_dim elements that grows like the
// workspace arena. The tables and positions must not overlap dq_gamma or
// dk_gamma (they are read after dq_gamma is written).
// Errors (glmnorm::Error, naming the argument): the forward's checks of the
// heads (head_dim >= 1, counts >= 0, q + k >= 1, no overflow) and of the Rope
// (qk_norm.h), and the norm backward's (rms_norm_backward.h).
// Semantics: torch autograd through Transformers' Glm4MoeRMSNorm and
// apply_rotary_pos_emb (partial rotary, rotate-half), as accurate or more.
#ifndef GLMNORM_QK_NORM_BACKWARD_H_
#define GLMNORM_QK_NORM_BACKWARD_H_

#include "glmnorm/qk_norm.h"
#include "glmnorm/rms_norm_backward.h"

namespace glmnorm {

void QkNormBackward(const ConstTensorView& qkv, const ConstTensorView& dqkv_out,
                    const TensorView& dqkv_in, const QkHeads& heads,
                    const ConstTensorView& q_gamma, const ConstTensorView& k_gamma,
                    const TensorView& dq_gamma, const TensorView& dk_gamma,
                    const NormOptions& options = {}, const Workspace& workspace = {},
                    const Execution& execution = {});
void QkNormBackward(const ConstTensorView& qkv, const ConstTensorView& dqkv_out,
                    const TensorView& dqkv_in, const QkHeads& heads,
                    const ConstTensorView& q_gamma, const ConstTensorView& k_gamma,
                    const TensorView& dq_gamma, const TensorView& dk_gamma,
                    const NormOptions& options, const Rope& rope,
                    const Workspace& workspace = {}, const Execution& execution = {});

}  // namespace glmnorm

#endif  // GLMNORM_QK_NORM_BACKWARD_H_
