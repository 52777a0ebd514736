// The float64 oracle of AddRmsNorm (add_rms_norm.h).
#ifndef GLMNORM_SRC_OPS_ADD_RMS_NORM_ADD_RMS_NORM_REFERENCE_H_
#define GLMNORM_SRC_OPS_ADD_RMS_NORM_ADD_RMS_NORM_REFERENCE_H_

#include <cstdint>
#include <string>

#include "glmnorm/add_rms_norm.h"

namespace glmnorm::reference {

// The float32 sum residual + delta (the reference's add is a float32 add),
// rounded to residual's dtype when `round` (the stored residual).
double AddedValue(const void* residual, DType r, const void* delta, DType d, int64_t index,
                  bool round);

// residual <- R(residual + delta); y <- RmsNorm of the rounded sum (or of the
// float32 sum when !options.normalize_rounded_sum), cast-then-scale rounding
// to residual's dtype. No validation.
void AddRmsNorm(const TensorView& residual, const ConstTensorView& delta,
                const ConstTensorView& gamma, const TensorView& y,
                const AddNormOptions& options);

}  // namespace glmnorm::reference

#endif  // GLMNORM_SRC_OPS_ADD_RMS_NORM_ADD_RMS_NORM_REFERENCE_H_
