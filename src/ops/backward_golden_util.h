// The comparison of glmnorm's gradients with torch autograd's (golden data),
// shared by the backward golden tests.
#ifndef GLMNORM_SRC_OPS_BACKWARD_GOLDEN_UTIL_H_
#define GLMNORM_SRC_OPS_BACKWARD_GOLDEN_UTIL_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "ops/backward_test_util.h"
#include "reference/reference.h"
#include "support/golden_data.h"
#include "support/test_support.h"

namespace glmnorm::bwdgolden {

inline void CheckAgainstTorch(const std::string& label, const ConstTensorView& x,
                              const ConstTensorView& gamma, const ConstTensorView& dy,
                              const ConstTensorView& dres, const NormOptions& opt,
                              const golden::Array& dx, const golden::Array& want_dx,
                              const golden::Array& dgamma, const golden::Array& want_dgamma) {
  const auto ref = reference::RmsNormBackward(x, gamma, dy, opt, dres);
  const test::UlpStats dx_stats =
      test::CompareUlp(dx.dtype, golden::AllBits(dx), golden::AllBits(want_dx));
  golden::Print(label + ", dx", dx_stats);
  if (dx.dtype == DType::kF32) {
    int64_t over = 0;
    double max_scaled = 0;
    for (int64_t i = 0; i < dx.NumElements(); ++i) {
      const double err = std::fabs(double(dx.At(i)) - double(want_dx.At(i)));
      const double su = err / std::max(bwdtest::Ulp(DType::kF32, ref.dx_scale[i]), 0x1p-149);
      max_scaled = std::max(max_scaled, su);
      over += su > 2 * bwdtest::kF32DxUlps;
    }
    std::printf("[golden] %s, dx: max %.2f ulp of the condition-aware scale from torch\n",
                label.c_str(), max_scaled);
    EXPECT_EQ(over, 0) << label;
  } else {
    EXPECT_GE(double(dx_stats.elements - dx_stats.worse()), 0.999 * double(dx_stats.elements))
        << label << ": " << dx_stats.Summary();
  }
  const test::UlpStats dg_stats =
      test::CompareUlp(dgamma.dtype, golden::AllBits(dgamma), golden::AllBits(want_dgamma));
  golden::Print(label + ", dgamma", dg_stats);
  if (dgamma.dtype == DType::kF32) {
    double max_rel = 0;
    for (int64_t i = 0; i < dgamma.NumElements(); ++i) {
      const double err = std::fabs(double(dgamma.At(i)) - double(want_dgamma.At(i)));
      max_rel = std::max(max_rel, err / ref.dgamma_scale[i]);
    }
    std::printf("[golden] %s, dgamma: max difference %.2e of sum|terms|\n", label.c_str(),
                max_rel);
    EXPECT_LE(max_rel, 2e-5) << label;
  } else {
    EXPECT_EQ(dg_stats.worse(), 0) << label << ": " << dg_stats.Summary();
  }
}

}  // namespace glmnorm::bwdgolden

#endif  // GLMNORM_SRC_OPS_BACKWARD_GOLDEN_UTIL_H_
