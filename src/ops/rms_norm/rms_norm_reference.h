// The float64 oracle of RmsNorm (rms_norm.h): float64 sums; the only roundings
// are the dtype casts of the op order modelled (docs/SPEC.md §2).
#ifndef GLMNORM_SRC_OPS_RMS_NORM_RMS_NORM_REFERENCE_H_
#define GLMNORM_SRC_OPS_RMS_NORM_RMS_NORM_REFERENCE_H_

#include <cstdint>
#include <string>

#include "glmnorm/rms_norm.h"

namespace glmnorm::reference {

// Same contract as glmnorm::RmsNorm (no validation: call it on valid args).
void RmsNorm(const ConstTensorView& x, const ConstTensorView& gamma, const TensorView& y,
             const NormOptions& options);

// Ulp errors of a computed RmsNorm output y against the oracle, over the
// first max_rows rows. In cast-then-scale mode with a 16-bit input the
// reference rounds x*r to the input dtype; where x*r lies within 2^-20
// (relative) of a rounding midpoint, float32 arithmetic may round either
// way, so both roundings are accepted as the oracle's h.
struct Comparison {
  int64_t elements = 0;
  int64_t max_ulp = 0;
  int64_t over_limit = 0;  // elements more than ulp_limit away
  std::string first_failure;
};
Comparison CompareRmsNorm(const ConstTensorView& x, const ConstTensorView& gamma,
                          const ConstTensorView& y, const NormOptions& options,
                          int64_t ulp_limit, int64_t max_rows);

}  // namespace glmnorm::reference

#endif  // GLMNORM_SRC_OPS_RMS_NORM_RMS_NORM_REFERENCE_H_
