// RmsNorm's case table: its dtype combinations, the widths its tests sweep,
// the shapes the benchmarks time, and the bytes a call moves.
#ifndef GLMNORM_SRC_OPS_RMS_NORM_RMS_NORM_CASES_H_
#define GLMNORM_SRC_OPS_RMS_NORM_RMS_NORM_CASES_H_

#include <cstdint>
#include <vector>

#include "ops/cases.h"

namespace glmnorm::cases {

// Every dtype combination of both modes: cast-then-scale defines y's dtype;
// single rounding writes x's dtype or f32. Any gamma dtype with any x.
inline std::vector<NormDTypes> RmsNormDTypes() {
  const DType kTypes[] = {DType::kF32, DType::kBF16, DType::kF16};
  std::vector<NormDTypes> combos;
  for (DType x : kTypes) {
    for (DType w : kTypes) {
      combos.push_back({x, w, Promote(w, x), Rounding::kCastThenScale});
      combos.push_back({x, w, x, Rounding::kSingle});
      if (x != DType::kF32) combos.push_back({x, w, DType::kF32, Rounding::kSingle});
    }
  }
  return combos;
}

// 1..33 (every tail length of every vector width), and around powers of
// two and GLM-4.5's sizes.
inline const std::vector<int64_t>& RmsNormTestWidths() {
  static const std::vector<int64_t> widths = [] {
    std::vector<int64_t> w;
    for (int64_t i = 1; i <= 33; ++i) w.push_back(i);
    for (int64_t i : {63, 64, 65, 127, 128, 129, 255, 256, 257, 1023, 1024, 1025, 4095, 4096,
                      4097, 5119, 5120, 5121, 8192}) {
      w.push_back(i);
    }
    return w;
  }();
  return widths;
}

// The shapes `glmnorm bench` and bench/targets_bench time.
inline constexpr Shape kRmsNormBenchShapes[] = {kHidden, kHiddenAir, kQkHeads};

// Bytes one call moves: x read, y written, gamma read once.
inline int64_t RmsNormBytes(int64_t rows, int64_t width, DType x, DType w, DType y) {
  return rows * width * int64_t(SizeOf(x) + SizeOf(y)) + width * int64_t(SizeOf(w));
}

}  // namespace glmnorm::cases

#endif  // GLMNORM_SRC_OPS_RMS_NORM_RMS_NORM_CASES_H_
