// The quantised norms' case table: dtype combinations x output formats x
// scalings, the widths the tests sweep, and the bytes a call moves.
#ifndef GLMNORM_SRC_OPS_QUANT_QUANT_CASES_H_
#define GLMNORM_SRC_OPS_QUANT_QUANT_CASES_H_

#include <cstdint>
#include <vector>

#include "ops/cases.h"

namespace glmnorm::cases {

struct QuantCase {
  DType t, w;
  Rounding rounding;
  DType q;       // kI8 or kF8E4M3
  bool dynamic;  // per-token scale, else a static one
  float scale;   // static
};

// The value dtype quantised (quant.h): what RmsNorm would store.
inline DType QuantValueType(DType t, DType w, Rounding rounding) {
  return rounding == Rounding::kCastThenScale ? Promote(w, t) : DType::kF32;
}

// x f32 / bf16 / f16 with gamma f32 or x's dtype, both modes, int8 and
// e4m3, a dynamic scale and static scales that put y in the saturating,
// normal and subnormal ranges.
inline std::vector<QuantCase> QuantCases() {
  std::vector<QuantCase> cases;
  for (const NormDTypes& c : CommonNormDTypes(/*single_to_f32=*/false)) {
    for (DType q : {DType::kI8, DType::kF8E4M3}) {
      cases.push_back({c.x, c.w, c.rounding, q, true, 1.0f});
      for (float s : {1e-3f, 0.0123f, 1.0f, 37.0f}) {
        cases.push_back({c.x, c.w, c.rounding, q, false, s});
      }
    }
  }
  return cases;
}

// 8192 and 8193: the last width whose values stay in the kernel's scratch
// row between the two sweeps of a dynamic scale, and the first that does not.
inline constexpr int64_t kQuantTestWidths[] = {1, 7, 64, 129, 1000, 5120, 8192, 8193};

// Bytes one RmsNormQuant call moves: x read, 1-byte codes and a 4-byte
// scale per row written, gamma read once.
inline int64_t RmsNormQuantBytes(int64_t rows, int64_t width, DType x, DType w) {
  return rows * width * int64_t(SizeOf(x) + 1) + width * int64_t(SizeOf(w)) + rows * 4;
}
// AddRmsNormQuant: residual read and written, delta read, codes and scales
// written, gamma read once.
inline int64_t AddRmsNormQuantBytes(int64_t rows, int64_t width, DType r, DType d, DType w) {
  return rows * width * int64_t(2 * SizeOf(r) + SizeOf(d) + 1) + width * int64_t(SizeOf(w)) +
         rows * 4;
}

}  // namespace glmnorm::cases

#endif  // GLMNORM_SRC_OPS_QUANT_QUANT_CASES_H_
