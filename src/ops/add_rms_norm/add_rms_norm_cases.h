// AddRmsNorm's case table: its dtype combinations, the widths its tests
// sweep, and the bytes a call moves.
#ifndef GLMNORM_SRC_OPS_ADD_RMS_NORM_ADD_RMS_NORM_CASES_H_
#define GLMNORM_SRC_OPS_ADD_RMS_NORM_ADD_RMS_NORM_CASES_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "ops/cases.h"

namespace glmnorm::cases {

struct AddDTypes {
  DType r, d, w, y;  // residual, delta, gamma, y
  Rounding rounding;
};

// Residual/delta pairs the op supports (delta == residual, or f32 residual
// with a 16-bit delta) x every gamma x the output dtypes of both modes.
inline std::vector<AddDTypes> AddRmsNormDTypes() {
  const std::pair<DType, DType> kPairs[] = {{DType::kF32, DType::kF32},
                                            {DType::kBF16, DType::kBF16},
                                            {DType::kF16, DType::kF16},
                                            {DType::kF32, DType::kBF16},
                                            {DType::kF32, DType::kF16}};
  std::vector<AddDTypes> combos;
  for (auto [r, d] : kPairs) {
    for (DType w : GammaDTypes(d)) {  // delta's dtype or f32
      combos.push_back({r, d, w, Promote(w, r), Rounding::kCastThenScale});
      // Single rounding: y in the residual's dtype, delta's dtype or f32.
      combos.push_back({r, d, w, r, Rounding::kSingle});
      if (r != DType::kF32) combos.push_back({r, d, w, DType::kF32, Rounding::kSingle});
      if (d != r) combos.push_back({r, d, w, d, Rounding::kSingle});
    }
  }
  return combos;
}

inline constexpr int64_t kAddRmsNormTestWidths[] = {1,   3,   8,    17,   64,   65,  127,
                                                    128, 129, 1000, 4096, 5120, 5121};

// Bytes one call moves: residual read and written, delta read, y written,
// gamma read once.
inline int64_t AddRmsNormBytes(int64_t rows, int64_t width, DType r, DType d, DType w, DType y) {
  return rows * width * int64_t(2 * SizeOf(r) + SizeOf(d) + SizeOf(y)) +
         width * int64_t(SizeOf(w));
}

}  // namespace glmnorm::cases

#endif  // GLMNORM_SRC_OPS_ADD_RMS_NORM_ADD_RMS_NORM_CASES_H_
