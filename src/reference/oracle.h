// The scalar helpers of the float64 oracles (each op's <op>_reference.cc):
// element access by dtype in float64, single roundings, ulp distances. The
// oracles are the tests' and the benchmark's judge; written for clarity, not
// speed, and independent of the SIMD kernels (no shared code beyond the
// scalar dtype conversions of dtype.h).
#ifndef GLMNORM_SRC_REFERENCE_ORACLE_H_
#define GLMNORM_SRC_REFERENCE_ORACLE_H_

#include <cstdint>
#include <limits>

#include "glmnorm/base.h"

namespace glmnorm::reference {

// Element access by dtype, as float64.
double Load(const void* base, DType t, int64_t index);
// Rounds v (float64) to dtype t once, round-to-nearest-even, and stores it.
void Store(void* base, DType t, int64_t index, double v);
// v rounded once to dtype t, back as float64 (f32: rounded to float32).
double RoundTo(DType t, double v);

// What UlpDistance gives when exactly one of its values is NaN: beyond any
// ulp limit.
inline constexpr int64_t kNaNUlpDistance = std::numeric_limits<int32_t>::max();

// Distance in units in the last place between two values of dtype t, read
// from their storage: floats of one width are ordered like integers
// (negatives mirrored), so +0 and -0 are 0 apart. 0 when both are NaN (any
// sign or payload), kNaNUlpDistance when exactly one is. The one per-element
// distance of the oracles and the tests (tests/support/test_support.h).
int64_t UlpDistance(DType t, const void* a, const void* b);

// Element offset of row `row` of a view (leading dims row-major).
template <typename Ptr>
int64_t RowOffset(const BasicTensorView<Ptr>& v, int64_t row) {
  int64_t off = 0;
  for (int i = v.rank - 2; i >= 0; --i) {
    off += (row % v.shape[i]) * v.stride[i];
    row /= v.shape[i];
  }
  return off;
}

}  // namespace glmnorm::reference

#endif  // GLMNORM_SRC_REFERENCE_ORACLE_H_
