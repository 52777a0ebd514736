// The float64 scalar reference: the oracle of the tests and of the
// benchmark's error column. Written for clarity, not speed; independent of
// the SIMD kernels (no shared code beyond the scalar dtype conversions).
//
// Sums are exact enough in float64; the only roundings are the dtype casts
// of the op order being modelled (docs/SPEC.md §2): in cast-then-scale mode
// h = x*r is rounded to the input dtype (unless f32), then y = gamma*h is
// rounded to y's dtype; in single-rounding mode only the final rounding.
#ifndef GLMNORM_SRC_REFERENCE_H_
#define GLMNORM_SRC_REFERENCE_H_

#include <cstdint>
#include <string>

#include "glmnorm/add_rms_norm.h"
#include "glmnorm/qk_norm.h"
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


// ---------------------------------------------------------------- decoder ops
// (docs/DECODER.md). Same conventions: float64 sums, only the dtype casts of
// the modelled op order round.

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

// The scalar quantisers of quant.h, written independently of the kernels
// (e4m3 by nearest-value search over the 127 finite magnitudes).
int8_t QuantizeI8(float value, float scale);
uint8_t QuantizeE4M3(float value, float scale);
float F32FromE4M3(uint8_t bits);
// max|v| / qmax over values (NaN ignored), 1 when that max is 0.
float DynamicScale(const float* values, int64_t n, DType q_type);

// QkNorm then RoPE, done separately: each q/k head through RmsNorm (this
// file's, stored in qkv_out's dtype), then the rotation in float64 of those
// stored values, rounded once. v is not touched. No validation.
void QkNorm(const ConstTensorView& qkv_in, const TensorView& qkv_out, const QkHeads& heads,
            const ConstTensorView& q_gamma, const ConstTensorView& k_gamma,
            const NormOptions& options, const Rope& rope);

}  // namespace glmnorm::reference

#endif  // GLMNORM_SRC_REFERENCE_H_
