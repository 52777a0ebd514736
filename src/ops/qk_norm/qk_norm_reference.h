// The float64 oracle of QkNorm (+ RoPE) (qk_norm.h).
#ifndef GLMNORM_SRC_OPS_QK_NORM_QK_NORM_REFERENCE_H_
#define GLMNORM_SRC_OPS_QK_NORM_QK_NORM_REFERENCE_H_

#include <cstdint>
#include <string>

#include "glmnorm/qk_norm.h"

namespace glmnorm::reference {

// QkNorm then RoPE, done separately: each q/k head through RmsNorm (this
// file's, stored in qkv_out's dtype), then the rotation in float64 of those
// stored values, rounded once. v is not touched. No validation;
// rope.positions rank 1 ([tokens]) only: the tests compare other shapes of
// positions with their flattened [tokens] form.
void QkNorm(const ConstTensorView& qkv_in, const TensorView& qkv_out, const QkHeads& heads,
            const ConstTensorView& q_gamma, const ConstTensorView& k_gamma,
            const NormOptions& options, const Rope& rope);

}  // namespace glmnorm::reference

#endif  // GLMNORM_SRC_OPS_QK_NORM_QK_NORM_REFERENCE_H_
