// The float64 scalar reference: the oracle of the tests and of the
// benchmark's error column. Written for clarity, not speed; independent of
// the SIMD kernels (no shared code beyond the scalar dtype conversions).
//
// Sums are exact enough in float64; the only roundings are the dtype casts
// of the op order being modelled (SPEC.md §2): in cast-then-scale mode
// h = x*r is rounded to the input dtype (unless f32), then y = gamma*h is
// rounded to y's dtype; in single-rounding mode only the final rounding.
#ifndef GLMNORM_SRC_REFERENCE_H_
#define GLMNORM_SRC_REFERENCE_H_

#include <cstdint>
#include <string>

#include "glmnorm/rms_norm.h"

namespace glmnorm::reference {

// Element access by dtype, as float64.
double Load(const void* base, DType t, int64_t index);
// Rounds v (float64) to dtype t once, round-to-nearest-even, and stores it.
void Store(void* base, DType t, int64_t index, double v);
// v rounded once to dtype t, back as float64 (f32: rounded to float32).
double RoundTo(DType t, double v);

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

// Distance in units in the last place between two values of dtype t, read
// from their storage; 0 when both are the same NaN class or equal infs,
// a huge number when exactly one is NaN.
int64_t UlpDistance(DType t, const void* a, const void* b);

}  // namespace glmnorm::reference

#endif  // GLMNORM_SRC_REFERENCE_H_
