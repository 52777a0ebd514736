// Residual add fused into the next norm (one pass over memory):
//
//   residual <- R(residual + delta)          float32 add, one rounding to R
//   y        <- RmsNorm(residual)            like RmsNorm, same options
//
// R is residual's dtype (bf16 in the released models; f32 residual streams
// with bf16 activations work too). By default the norm reads the ROUNDED sum,
// as Transformers does; normalize_rounded_sum = false normalises the float32
// sum before rounding (FlashInfer's and vLLM-CPU's choice). y may be delta
// (in place, as engines call it); y must not be residual.
#ifndef GLMNORM_ADD_RMS_NORM_H_
#define GLMNORM_ADD_RMS_NORM_H_

#include "glmnorm/base.h"
#include "glmnorm/execution.h"

namespace glmnorm {

struct AddNormOptions : NormOptions {
  bool normalize_rounded_sum = true;
};

// residual, delta and y have the same shape; gamma is 1-D of length width.
// In cast-then-scale mode the norm's input dtype T is residual's dtype.
void AddRmsNorm(const TensorView& residual, const ConstTensorView& delta,
                const ConstTensorView& gamma, const TensorView& y,
                const AddNormOptions& options = {}, const Execution& execution = {});

// AddRmsNorm that also writes the per-row multiplier of the norm of the
// updated residual, for AddRmsNormBackward (see RmsNormWithRstd, rms_norm.h).
void AddRmsNormWithRstd(const TensorView& residual, const ConstTensorView& delta,
                        const ConstTensorView& gamma, const TensorView& y,
                        const TensorView& rstd, const AddNormOptions& options = {},
                        const Execution& execution = {});

}  // namespace glmnorm

#endif  // GLMNORM_ADD_RMS_NORM_H_
