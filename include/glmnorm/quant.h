// Norms with quantised outputs: what an FP8 (or int8) GEMM consumes next.
//
//   q = saturate(RNE(v / scale))      (float32 division, one rounding)
//
// v, the value quantised, is y EXACTLY as RmsNorm / AddRmsNorm would store it,
// converted to float32:
//   - cast-then-scale (default): y rounded to Promote(gamma, x) -- with bf16
//     activations and bf16 gammas the bf16 y of the reference (Transformers);
//     with f32 gammas, the f32 y.
//   - single-rounding: the float32 y, never rounded to a 16-bit type (so q is
//     the only rounding after the float32 product).
// Output dtypes:
//   - DType::kI8: RNE to an integer, saturated to [-128, 127]; NaN -> 0.
//     qmax = 127.
//   - DType::kF8E4M3 (OCP e4m3fn, bias 7, no inf): RNE, subnormals kept,
//     saturated to +-448 (inf too); NaN -> 0x7F/0xFF (its sign); -0 -> 0x80.
//     qmax = 448.
// Scales:
//   - static: one per-tensor scale, finite and > 0.
//   - dynamic per token, for every row whatever its magnitude:
//       m = max |v| over the row's FINITE values (NaN and +-inf left out;
//           an inf v saturates to +-qmax, a NaN v gives the NaN code);
//       scale = 1 when m is 0 (all its q are 0 or NaN codes);
//       else scale = max(m / qmax, 2^-126)  (float32 division, RNE),
//            lowered by one ulp if qmax * scale would overflow to inf.
//     So every scale is a normal, positive, finite float32; every code
//     decodes (q * scale) to a finite value; the row's largest finite |v|
//     gets code +-qmax unless m / qmax < 2^-126 (then all |q| < qmax, and
//     values below scale * the smallest code quantise to 0). Scales are
//     written to the caller's f32 array. Dequantise as q * scale.
// NaN codes: the sign of a NaN v is kept (0x7F / 0xFF); v is NaN where the
// norm gives NaN (a NaN input, or inf * 0 when a row holds an inf: x86's
// default NaN is negative). The bits are the same on every SIMD target.
// Empty tensors (a dim of 0) are a no-op; their pointers, scales included,
// may be null.
// Supported: x / residual / delta dtypes as in RmsNorm / AddRmsNorm; gamma
// f32 or the activation's dtype (x, or delta for AddRmsNormQuant). Other
// gammas are rejected with an error.
#ifndef GLMNORM_QUANT_H_
#define GLMNORM_QUANT_H_

#include <cstdint>

#include "glmnorm/add_rms_norm.h"
#include "glmnorm/base.h"
#include "glmnorm/execution.h"

namespace glmnorm {

enum class QuantScaling : uint8_t { kStatic, kDynamicPerToken };

struct QuantOptions {
  QuantScaling scaling = QuantScaling::kDynamicPerToken;
  float scale = 1.0f;           // kStatic: the per-tensor scale (finite, > 0)
  // kDynamicPerToken: f32 [rows] or [rows, 1] (any row stride), written in
  // row order. May be empty (null) when the tensor has no elements.
  TensorView scales;
};

// q = Quant(RmsNorm(x)). q: same shape as x, dtype kI8 or kF8E4M3, must not
// overlap x.
void RmsNormQuant(const ConstTensorView& x, const ConstTensorView& gamma, const TensorView& q,
                  const QuantOptions& quant, const NormOptions& options = {},
                  const Execution& execution = {});

// residual <- R(residual + delta); q = Quant(RmsNorm(residual)) (see
// add_rms_norm.h for the add and normalize_rounded_sum). q must not overlap
// residual or delta.
void AddRmsNormQuant(const TensorView& residual, const ConstTensorView& delta,
                     const ConstTensorView& gamma, const TensorView& q,
                     const QuantOptions& quant, const AddNormOptions& options = {},
                     const Execution& execution = {});

}  // namespace glmnorm

#endif  // GLMNORM_QUANT_H_
