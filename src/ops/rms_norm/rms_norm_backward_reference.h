// The float64 oracle of the norm backward (rms_norm_backward.h): the same op
// sequence in float64, whose only roundings are the dtype casts the op
// sequence names (dh and the dgamma terms to dy's dtype, x̂ to x's dtype, in
// cast-then-scale mode). Also the unrounded row maths for the
// finite-difference check, and the error scales the accuracy tests use.
#ifndef GLMNORM_SRC_OPS_RMS_NORM_RMS_NORM_BACKWARD_REFERENCE_H_
#define GLMNORM_SRC_OPS_RMS_NORM_RMS_NORM_BACKWARD_REFERENCE_H_

#include <cstdint>
#include <vector>

#include "glmnorm/rms_norm_backward.h"

namespace glmnorm::reference {

// The oracle's gradients before any rounding to an output dtype.
struct NormBackwardResult {
  int64_t rows = 0, width = 0;
  std::vector<double> dx;        // rows * width, row-major (row = the views' row order)
  // Per element: the size of what float32 arithmetic adds and cancels in dx,
  // |rr*dh| + |rr*x̂| * (|c| + sum_i |dh_i x̂_i| / n) + |dres|: an error
  // bound in ulps of this scale does not blow up where dx cancels to ~0.
  std::vector<double> dx_scale;
  // Per element: r * ulp_Dy(dh) where dh = Dy(dy * g) (cast-then-scale, 16-bit
  // dy) lies within 2^-20 (relative) of a rounding midpoint of Dy: float32
  // (whose product dy * (gamma + offset) is itself rounded) may round dh the
  // other way; plus r * |xf| times what such flips of the row move c by.
  std::vector<double> dx_slack;
  std::vector<double> dgamma;        // width
  std::vector<double> dgamma_scale;  // sum over rows of |term|
  // Cast-then-scale with a 16-bit x: sum over rows of |dy| * ulp_T(x̂) for the
  // terms whose x̂ lies within 2^-20 (relative) of a rounding midpoint of T,
  // where float32 may round x̂ the other way (as CompareRmsNorm allows).
  std::vector<double> dgamma_slack;
};

// dy's dtype is the forward's y dtype; dres (rank 0: none) is added to dx,
// in cast-then-scale mode after rounding dx to dres's dtype (torch's order).
NormBackwardResult RmsNormBackward(const ConstTensorView& x, const ConstTensorView& gamma,
                                   const ConstTensorView& dy, const NormOptions& options,
                                   const ConstTensorView& dres = {});

// Unrounded float64 row maths (no dtype casts): y_i = g_i * x_i * r, and its
// gradients for the incoming gradient dy, for the finite-difference check.
void ForwardRowF64(const double* x, const double* g, int64_t n, double eps, double* y);
void BackwardRowF64(const double* x, const double* g, const double* dy, int64_t n, double eps,
                    double* dx, double* dgamma_terms);

}  // namespace glmnorm::reference

#endif  // GLMNORM_SRC_OPS_RMS_NORM_RMS_NORM_BACKWARD_REFERENCE_H_
