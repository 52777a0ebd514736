// RMSNorm exactly as GLM-4.5 checkpoints expect (see docs/SPEC.md).
//
//   r = 1 / sqrt(mean(float32(x)^2) + eps)           (float32, fixed order)
//   cast-then-scale (default, = Transformers Glm4MoeRMSNorm):
//       y = Out( (gamma + weight_offset) * float32( T(x * r) ) )
//   single-rounding (FlashInfer, TransformerEngine, F.rms_norm):
//       y = Out( (gamma + weight_offset) * (x * r) )
//
// T is x's dtype, Out is y's dtype; products are float32. The reduction order
// is fixed (docs/ACCURACY.md), so a row's output bits do not depend on the
// batch it is in, its alignment, the thread count or the SIMD target.
#ifndef GLMNORM_RMS_NORM_H_
#define GLMNORM_RMS_NORM_H_

#include "glmnorm/base.h"
#include "glmnorm/execution.h"

namespace glmnorm {

// y = RMSNorm(x) over the last dim. gamma is 1-D of length width. x and y
// have the same shape; y may be x (in place) but must not overlap it
// otherwise. Throws glmnorm::Error (nothing written) on invalid arguments.
void RmsNorm(const ConstTensorView& x, const ConstTensorView& gamma, const TensorView& y,
             const NormOptions& options = {}, const Execution& execution = {});

// RmsNorm that also writes the per-row multiplier the backward needs
// (RmsNormBackward's `rstd`, rms_norm_backward.h): rstd[row] = r * prescale,
// float32, the exact factor the forward multiplied x by (1/sqrt(mean(x^2) +
// eps); prescale is 1 except for rows rescaled against float32 overflow or
// underflow, docs/ACCURACY.md). rstd: f32 1-D [rows], any stride, must not
// overlap the other views. y's bits are RmsNorm's.
void RmsNormWithRstd(const ConstTensorView& x, const ConstTensorView& gamma,
                     const TensorView& y, const TensorView& rstd,
                     const NormOptions& options = {}, const Execution& execution = {});

// Checks the arguments like RmsNorm does, without computing. Throws on error.
void ValidateRmsNorm(const ConstTensorView& x, const ConstTensorView& gamma,
                     const TensorView& y, const NormOptions& options = {});

}  // namespace glmnorm

#endif  // GLMNORM_RMS_NORM_H_
