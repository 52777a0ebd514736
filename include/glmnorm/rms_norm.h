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

#include "glmnorm/dtype.h"
#include "glmnorm/tensor.h"
#include "glmnorm/threading.h"

namespace glmnorm {

constexpr float kGlmRmsNormEps = 1e-5f;  // rms_norm_eps of GLM-4.5 and -Air

enum class Rounding : uint8_t {
  // Reference op order: cast x*r to x's dtype, then multiply by gamma in the
  // promoted dtype of (gamma, x). y's dtype must be Promote(gamma, x).
  kCastThenScale,
  // Multiply x*r*gamma in float32 and round once to y's dtype, which must be
  // x's dtype or f32.
  kSingle,
};

struct NormOptions {
  float eps = kGlmRmsNormEps;  // added inside the sqrt; finite and >= 0
  Rounding rounding = Rounding::kCastThenScale;
  // 0 for plain RMSNorm, 1 for Gemma-style (1 + gamma). Added in float32.
  float weight_offset = 0.0f;
  // nullptr: the default pool (see threading.h). Otherwise the caller's own.
  const Executor* executor = nullptr;
};

// y = RMSNorm(x) over the last dim. gamma is 1-D of length width. x and y
// have the same shape; y may be x (in place) but must not overlap it
// otherwise. Throws glmnorm::Error (nothing written) on invalid arguments.
void RmsNorm(const ConstTensorView& x, const ConstTensorView& gamma, const TensorView& y,
             const NormOptions& options = {});

// Checks the arguments like RmsNorm does, without computing. Throws on error.
void ValidateRmsNorm(const ConstTensorView& x, const ConstTensorView& gamma,
                     const TensorView& y, const NormOptions& options = {});

}  // namespace glmnorm

#endif  // GLMNORM_RMS_NORM_H_
