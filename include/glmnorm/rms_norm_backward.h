// The backward pass of RmsNorm (rms_norm.h), deterministic (docs/BACKWARD.md).
//
// Semantics: what torch autograd computes through Transformers'
// Glm4MoeRMSNorm (cast-then-scale) or through F.rms_norm's op order (single
// rounding). Per row of width n, with T = x's dtype, Dy = dy's dtype (the
// forward's y dtype), g_i = gamma_i + weight_offset (float32), all maths in
// float32 unless a rounding is named:
//
//   rr   = r * prescale           the forward's multiplier 1/sqrt(mean(x^2)+eps)
//                                  (recomputed exactly as the forward does it,
//                                  or taken from the `rstd` the forward saved)
//   xf_i = x_i * rr               the UNROUNDED normalised value
//   dh_i = T(dy_i * g_i)           cast-then-scale: rounded to x's dtype T, as
//                                  torch's `weight * h_cast` backward does (the
//                                  product in Dy, then the gradient of the
//                                  T-typed h_cast; with a float32 weight and
//                                  16-bit x, Dy is float32 and T is the only
//                                  rounding);
//        = dy_i * g_i              single rounding: float32
//   c    = (sum_i dh_i * xf_i) / n   canonical reduction order (ACCURACY.md)
//   dx_i = dX( rr * (dh_i - xf_i * c) )          rounded once to dx's dtype
//
// torch treats the forward's `.to(input_dtype)` cast as the identity for the
// gradient, so dx uses xf (not the rounded value). dgamma uses the value the
// forward multiplied gamma by:
//
//   cast-then-scale: dgamma_j = dG( sum_rows Dy(dy_j * T(xf_j)) )
//   single:          dgamma_j = dG( sum_rows dy_j * xf_j )
//
// with the sum over rows in float32 (see Determinism) and one rounding to
// dgamma's dtype dG (the caller's choice). This is torch's op sequence up to
// the order of the float32 sums, which is glmnorm's own.
//
// Determinism: rows are cut into blocks of kDGammaRowBlock consecutive rows
// (the unit of the thread split) and leaves of kDGammaLeafRows rows; each
// leaf's dgamma terms are summed in row order into a float32 row of the
// workspace, then the leaves' sums are added as a pairwise tree fixed by the
// leaf count alone (the float32 error grows like 8 + log2(rows / 8) adds,
// below torch's 4-level cascade sum). No atomics: the bits of dx and dgamma
// do not depend on the thread count, the executor, the workspace or the SIMD
// target.
//
// Workspace: NormBackwardWorkspaceBytes(rows, width) bytes. Pass a buffer in
// `workspace` (any alignment; at least that many bytes) or leave it empty to
// use an internal per-calling-thread arena that grows when a call needs more
// than any call before it on that thread (the only allocation; never freed
// until the thread exits). Nothing else is allocated.
#ifndef GLMNORM_RMS_NORM_BACKWARD_H_
#define GLMNORM_RMS_NORM_BACKWARD_H_

#include <cstddef>
#include <cstdint>

#include "glmnorm/base.h"
#include "glmnorm/execution.h"

namespace glmnorm {

// Rows per block of the thread split, and rows per dgamma leaf sum (both
// fixed: part of the bits' definition).
constexpr int64_t kDGammaRowBlock = 64;
constexpr int64_t kDGammaLeafRows = 8;

// Caller-owned scratch memory of a backward call; empty: the internal arena.
struct Workspace {
  void* data = nullptr;
  size_t bytes = 0;
};

// Bytes of workspace a backward over `rows` rows of `width` needs:
// ceil(rows / kDGammaLeafRows) + 2 * ceil(rows / kDGammaRowBlock) float32 rows
// of width rounded up to 16 (per leaf: its dgamma sum; per block: the xf and
// dh of the row in hand), plus 64 bytes of alignment slack (0 when rows or
// width is 0). 4096 x 5120: 12.5 MiB.
size_t NormBackwardWorkspaceBytes(int64_t rows, int64_t width);

// Gradients of y = RmsNorm(x, gamma, options).
//   x:      the forward's input, [..., width], f32 / bf16 / f16, any row strides
//   gamma:  1-D [width], f32 / bf16 / f16 (the forward's)
//   dy:     [..., width] like x; dtype = the forward's y dtype (cast-then-scale:
//           Promote(gamma, x); single: x's dtype or f32)
//   dx:     [..., width] like x; dtype x's dtype or f32; may be dy (in place,
//           same dtype) but must not overlap x, gamma or dgamma
//   dgamma: 1-D [width], contiguous, f32 / bf16 / f16 (overwritten, not added to)
//   rstd:   optional (rank 0 = absent): f32 1-D [rows], any stride, as saved by
//           RmsNormWithRstd with the same options; used instead of recomputing
//           (same bits, except in the last bit of xf on rows the forward
//           rescaled against float32 overflow / underflow, SPEC.md §9); each
//           value must be >= 0 or NaN (a negative one is an error)
// Errors (glmnorm::Error, nothing written) name the argument and what was
// expected. 0 rows: dx untouched, dgamma zeros. Width 0: nothing to do.
void RmsNormBackward(const ConstTensorView& x, const ConstTensorView& gamma,
                     const ConstTensorView& dy, const TensorView& dx, const TensorView& dgamma,
                     const NormOptions& options = {}, const ConstTensorView& rstd = {},
                     const Workspace& workspace = {}, const Execution& execution = {});

}  // namespace glmnorm

#endif  // GLMNORM_RMS_NORM_BACKWARD_H_
