// The backward pass of AddRmsNorm (add_rms_norm.h), in one pass.
//
// The forward computes h = R(residual + delta) (stored in residual) and
// y = RmsNorm(h). Both residual and delta reach h through an add, so both
// receive the gradient of h:
//
//   d_h = dx_norm + d_residual_out
//
// where dx_norm is RmsNormBackward's dx for the norm of h (same maths,
// rms_norm_backward.h) and d_residual_out is the gradient that reaches the
// residual stream from the later layers (the residual output is read by the
// next layer too). Cast-then-scale mode follows torch autograd's order:
// dx_norm is rounded to R (it is x.grad of the norm, a tensor of h's dtype),
// then added to d_residual_out in float32 and rounded to R again. Single
// rounding: the float32 sum dx_norm + d_residual_out is rounded once.
// torch treats the rounding R(...) of the forward's add as the identity for
// the gradient.
#ifndef GLMNORM_ADD_RMS_NORM_BACKWARD_H_
#define GLMNORM_ADD_RMS_NORM_BACKWARD_H_

#include "glmnorm/add_rms_norm.h"
#include "glmnorm/rms_norm_backward.h"

namespace glmnorm {

// h:              the residual AFTER the forward (R(residual + delta)), [..., width]
// gamma:          1-D [width]
// dy:             gradient of y, the forward's y dtype (as RmsNormBackward with x = h)
// d_residual_out: gradient of the residual output, dtype R, same shape; may be
//                 rank 0 (absent: zero)
// d_h:            output, dtype R, same shape: the gradient of residual (and of delta
//                 when delta's dtype is R); may be d_residual_out or dy (in place,
//                 same dtype)
// d_delta:        optional output (rank 0: not written) in delta's dtype when it
//                 differs from R (f32 residual stream, bf16 activations): d_h
//                 rounded once from float32 to that dtype
// dgamma, rstd, workspace: as RmsNormBackward. options.normalize_rounded_sum
// must be true when R is 16-bit (the float32 sum the other mode normalises
// is not kept by the forward).
void AddRmsNormBackward(const ConstTensorView& h, const ConstTensorView& gamma,
                        const ConstTensorView& dy, const ConstTensorView& d_residual_out,
                        const TensorView& d_h, const TensorView& d_delta,
                        const TensorView& dgamma, const AddNormOptions& options = {},
                        const ConstTensorView& rstd = {}, const Workspace& workspace = {},
                        const Execution& execution = {});

}  // namespace glmnorm

#endif  // GLMNORM_ADD_RMS_NORM_BACKWARD_H_
