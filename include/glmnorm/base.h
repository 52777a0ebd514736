// The shared vocabulary of glmnorm: dtypes (dtype.h), tensor views
// (tensor.h), the error type (error.h), and the options of the norm maths
// that every op shares: eps, the rounding mode and the weight offset.
// Every op header includes this one; it includes no op header.
#ifndef GLMNORM_BASE_H_
#define GLMNORM_BASE_H_

#include <cstdint>

#include "glmnorm/dtype.h"
#include "glmnorm/error.h"
#include "glmnorm/tensor.h"

namespace glmnorm {

// rms_norm_eps of GLM-4.5 and GLM-4.5-Air (config.json). Transformers'
// Glm4MoeRMSNorm defaults to 1e-6: a GLM checkpoint must not use that.
constexpr float kGlmRmsNormEps = 1e-5f;

// Where the output of a norm is rounded (docs/SPEC.md §2).
enum class Rounding : uint8_t {
  // Reference op order (Transformers' Glm4MoeRMSNorm): cast x*r to x's dtype,
  // then multiply by gamma in the promoted dtype of (gamma, x). y's dtype
  // must be Promote(gamma, x).
  kCastThenScale,
  // Multiply x*r*gamma in float32 and round once to y's dtype, which must be
  // x's dtype or f32 (FlashInfer, TransformerEngine, F.rms_norm).
  kSingle,
};

// The maths of a norm. Where the work runs is not here: see execution.h.
struct NormOptions {
  float eps = kGlmRmsNormEps;  // added inside the sqrt; finite and >= 0
  Rounding rounding = Rounding::kCastThenScale;
  // 0 for plain RMSNorm, 1 for Gemma-style (1 + gamma). Added in float32.
  float weight_offset = 0.0f;
};

}  // namespace glmnorm

#endif  // GLMNORM_BASE_H_
