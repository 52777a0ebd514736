// AddRmsNorm against the float64 oracle on every compiled SIMD target, its
// bit-exact equality with RmsNorm of the new residual, in-place use (y is
// delta), f32 residual streams with 16-bit activations, and errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "glmnorm/add_rms_norm.h"
#include "glmnorm/glmnorm.h"
#include "ops/add_rms_norm/add_rms_norm_cases.h"
#include "reference/reference.h"
#include "support/test_support.h"

namespace glmnorm {
namespace {

using test::Buffer;
using ::testing::HasSubstr;

// The case table (add_rms_norm_cases.h).
using AddCombo = cases::AddDTypes;
std::vector<AddCombo> AddCombos() { return cases::AddRmsNormDTypes(); }

std::string Describe(const AddCombo& c, int64_t width, const char* target, bool rounded_sum) {
  return std::string(target) + " residual=" + std::string(Name(c.r)) +
         " delta=" + std::string(Name(c.d)) + " w=" + std::string(Name(c.w)) +
         " y=" + std::string(Name(c.y)) +
         (c.rounding == Rounding::kCastThenScale ? " cast-then-scale" : " single") +
         (rounded_sum ? " rounded-sum" : " f32-sum") + " width=" + std::to_string(width);
}

struct AddCase {
  AddCombo c;
  int64_t rows, width;
  Buffer residual, delta, gamma, y;
  AddCase(const AddCombo& combo, int64_t rows_, int64_t width_, size_t misalign = 0)
      : c(combo),
        rows(rows_),
        width(width_),
        residual(combo.r, rows_ * width_, misalign),
        delta(combo.d, rows_ * width_, misalign),
        gamma(combo.w, width_, misalign),
        y(combo.y, rows_ * width_, misalign) {
    test::FillRandom(residual);
    test::FillRandom(delta);
    test::FillGamma(gamma);
  }
  TensorView R() { return Contiguous<void*>(residual.data(), c.r, {rows, width}); }
  ConstTensorView D() { return Contiguous<const void*>(delta.data(), c.d, {rows, width}); }
  ConstTensorView G() { return Contiguous<const void*>(gamma.data(), c.w, {width}); }
  TensorView Y() { return Contiguous<void*>(y.data(), c.y, {rows, width}); }
};

AddNormOptions Opts(const AddCombo& c, bool rounded_sum, float offset = 0.0f) {
  AddNormOptions o;
  o.rounding = c.rounding;
  o.normalize_rounded_sum = rounded_sum;
  o.weight_offset = offset;
  return o;
}

// Runs AddRmsNorm and checks the new residual (bit-exact: one float32 add,
// one rounding) and y against the oracle.
void CheckAgainstOracle(const AddCombo& c, int64_t rows, int64_t width, bool rounded_sum,
                        float offset, const std::string& what, size_t misalign = 0) {
  AddCase k(c, rows, width, misalign);
  const AddNormOptions opt = Opts(c, rounded_sum, offset);
  const Buffer original_residual = k.residual;
  // Oracle on copies.
  Buffer ref_res = k.residual, ref_y = k.y;
  reference::AddRmsNorm(Contiguous<void*>(ref_res.data(), c.r, {rows, width}), k.D(), k.G(),
                        Contiguous<void*>(ref_y.data(), c.y, {rows, width}), opt);
  AddRmsNorm(k.R(), k.D(), k.G(), k.Y(), opt);
  ASSERT_EQ(0, std::memcmp(k.residual.data(), ref_res.data(), rows * width * SizeOf(c.r)))
      << what << ": new residual differs from the rounded float32 sum";
  if (rounded_sum) {
    // The norm read the new residual: RmsNorm's oracle applies as is.
    const auto stats =
        test::CompareWithOracle(AsConst(k.R()), k.G(), AsConst(k.Y()), opt, test::UlpLimit(c.y));
    EXPECT_EQ(stats.over_limit, 0) << what << ": max ulp " << stats.max_ulp << ", first "
                                   << stats.first_failure;
  } else {
    // Against the float64 AddRmsNorm of the float32 sums. With a 16-bit
    // residual dtype in cast-then-scale mode, x*r may round either way where
    // it lies within 2^-20 of a midpoint: both roundings are accepted (as in
    // RmsNorm's oracle).
    const bool cast16 = c.rounding == Rounding::kCastThenScale && c.r != DType::kF32;
    const int64_t limit = test::UlpLimit(c.y);
    int64_t worst = 0, over = 0;
    for (int64_t row = 0; row < rows; ++row) {
      std::vector<double> in(width);
      double sum = 0.0;
      for (int64_t i = 0; i < width; ++i) {
        in[i] = reference::AddedValue(original_residual.data(), c.r, k.delta.data(), c.d,
                                      row * width + i, false);
        sum += in[i] * in[i];
      }
      const double r = 1.0 / std::sqrt(sum / double(width) + double(opt.eps));
      for (int64_t i = 0; i < width; ++i) {
        double g = k.gamma.Get(i);
        if (offset != 0.0f) g += offset;
        const double h = in[i] * r;
        double cands[2] = {h, h};
        if (cast16) {
          cands[0] = reference::RoundTo(c.r, h * (1.0 - 0x1p-20));
          cands[1] = reference::RoundTo(c.r, h * (1.0 + 0x1p-20));
        }
        int64_t best = INT64_MAX;
        for (double hc : cands) {
          uint32_t want = 0;
          reference::Store(&want, c.y, 0, g * hc);
          best = std::min(best, reference::UlpDistance(
                                    c.y, &want,
                                    static_cast<const char*>(k.y.data()) +
                                        (row * width + i) * SizeOf(c.y)));
        }
        worst = std::max(worst, best);
        over += best > limit;
      }
    }
    EXPECT_EQ(over, 0) << what << ": max ulp " << worst;
  }
}

const auto& kWidths = cases::kAddRmsNormTestWidths;

TEST(AddRmsNorm, OracleEveryComboEveryTarget) {
  test::Seed();
  test::ForEachTarget([](const char* target) {
    for (const AddCombo& c : AddCombos()) {
      for (bool rounded_sum : {true, false}) {
        for (int64_t width : kWidths) {
          CheckAgainstOracle(c, 3, width, rounded_sum, 0.0f,
                             Describe(c, width, target, rounded_sum));
        }
      }
    }
  });
}

TEST(AddRmsNorm, GemmaOffsetAndMisalignment) {
  test::ForEachTarget([](const char* target) {
    for (const AddCombo& c : AddCombos()) {
      for (int64_t width : {7, 128, 5121}) {
        CheckAgainstOracle(c, 2, width, true, 1.0f,
                           Describe(c, width, target, true) + " offset=1");
        CheckAgainstOracle(c, 2, width, true, 0.0f,
                           Describe(c, width, target, true) + " misaligned", 3);
      }
    }
  });
}

// Default mode: y is RmsNorm(new residual) bit for bit (same reduction order).
TEST(AddRmsNorm, EqualsRmsNormOfNewResidualBitForBit) {
  test::ForEachTarget([](const char* target) {
    for (const AddCombo& c : AddCombos()) {
      for (int64_t width : {5, 128, 4097, 5120}) {
        // RmsNorm has no f32 -> 16-bit single-rounding output to compare with.
        if (c.y != c.r && c.y != DType::kF32) continue;
        AddCase k(c, 3, width);
        const AddNormOptions opt = Opts(c, true);
        AddRmsNorm(k.R(), k.D(), k.G(), k.Y(), opt);
        Buffer y2(c.y, 3 * width);
        RmsNorm(AsConst(k.R()), k.G(), Contiguous<void*>(y2.data(), c.y, {3, width}), opt);
        EXPECT_EQ(0, std::memcmp(y2.data(), k.y.data(), 3 * width * SizeOf(c.y)))
            << Describe(c, width, target, true);
      }
    }
  });
}

// y == delta (in place, as engines call it) gives the bits of out of place.
TEST(AddRmsNorm, InPlaceIntoDeltaMatchesOutOfPlace) {
  test::ForEachTarget([](const char* target) {
    for (const AddCombo& c : AddCombos()) {
      if (c.y != c.d) continue;
      for (bool rounded_sum : {true, false}) {
        for (int64_t width : {9, 128, 5120}) {
          AddCase k(c, 4, width);
          Buffer res2 = k.residual, delta2 = k.delta;
          const AddNormOptions opt = Opts(c, rounded_sum);
          AddRmsNorm(k.R(), k.D(), k.G(), k.Y(), opt);
          const auto dv = Contiguous<void*>(delta2.data(), c.d, {4, width});
          AddRmsNorm(Contiguous<void*>(res2.data(), c.r, {4, width}), AsConst(dv), k.G(), dv,
                     opt);
          const std::string what = Describe(c, width, target, rounded_sum);
          EXPECT_EQ(0, std::memcmp(delta2.data(), k.y.data(), 4 * width * SizeOf(c.y))) << what;
          EXPECT_EQ(0, std::memcmp(res2.data(), k.residual.data(), 4 * width * SizeOf(c.r)))
              << what;
        }
      }
    }
  });
}

TEST(AddRmsNorm, SameBitsOnEveryTarget) {
  for (const AddCombo& c : AddCombos()) {
    for (bool rounded_sum : {true, false}) {
      for (int64_t width : {1, 100, 128, 5120, 5121}) {
        AddCase k(c, 3, width);
        const std::string what = Describe(c, width, "", rounded_sum) + " y, residual";
        test::ExpectSameBitsOnEveryTarget(what, [&](const char*) {
          Buffer res = k.residual, y(c.y, 3 * width);
          AddRmsNorm(Contiguous<void*>(res.data(), c.r, {3, width}), k.D(), k.G(),
                     Contiguous<void*>(y.data(), c.y, {3, width}), Opts(c, rounded_sum));
          std::vector<uint8_t> bits = test::BytesOf(y.data(), 3 * width * SizeOf(c.y));
          const std::vector<uint8_t> rb = test::BytesOf(res.data(), 3 * width * SizeOf(c.r));
          bits.insert(bits.end(), rb.begin(), rb.end());
          return bits;
        });
      }
    }
  }
}

// A row alone and inside a threaded batch give identical bits.
TEST(AddRmsNorm, BatchInvariance) {
  const AddCombo c{DType::kBF16, DType::kBF16, DType::kBF16, DType::kBF16,
                   Rounding::kCastThenScale};
  const int64_t width = 5120, rows = 300;
  AddCase k(c, rows, width);
  Buffer res_copy = k.residual;
  AddRmsNorm(k.R(), k.D(), k.G(), k.Y());
  for (int64_t r = 0; r < rows; r += 37) {
    Buffer res1(c.r, width), y1(c.y, width);
    std::memcpy(res1.data(), static_cast<const char*>(res_copy.data()) + r * width * 2, width * 2);
    AddRmsNorm(Contiguous<void*>(res1.data(), c.r, {1, width}),
               Contiguous<const void*>(static_cast<const char*>(k.delta.data()) + r * width * 2,
                                       c.d, {1, width}),
               k.G(), Contiguous<void*>(y1.data(), c.y, {1, width}));
    EXPECT_EQ(0, std::memcmp(y1.data(), static_cast<const char*>(k.y.data()) + r * width * 2,
                             width * 2))
        << "row " << r;
  }
}

// The residual add is a float32 add rounded once: bf16 1 + 2^-9 is a tie that
// rounds to even (1), and the norm then reads 1, not 1 + 2^-9.
TEST(AddRmsNorm, RoundedSumIsWhatTheNormReads) {
  const int64_t width = 4;
  std::vector<uint16_t> res(width, BF16FromF32(1.0f)), delta(width, BF16FromF32(0x1p-9f)),
      g(width, BF16FromF32(1.0f)), y(width);
  AddRmsNorm(Contiguous<void*>(res.data(), DType::kBF16, {width}),
             Contiguous<const void*>(delta.data(), DType::kBF16, {width}),
             Contiguous<const void*>(g.data(), DType::kBF16, {width}),
             Contiguous<void*>(y.data(), DType::kBF16, {width}));
  EXPECT_EQ(res[0], BF16FromF32(1.0f));
}

// ---------------------------------------------------------------- errors

struct AddArgs {
  std::vector<uint16_t> r = std::vector<uint16_t>(4 * 8, BF16FromF32(1.0f));
  std::vector<uint16_t> d = std::vector<uint16_t>(4 * 8, BF16FromF32(0.5f));
  std::vector<uint16_t> g = std::vector<uint16_t>(8, BF16FromF32(1.0f));
  std::vector<uint16_t> y = std::vector<uint16_t>(4 * 8, 0x1234);
  TensorView rv = Contiguous<void*>(r.data(), DType::kBF16, {4, 8});
  ConstTensorView dv = Contiguous<const void*>(d.data(), DType::kBF16, {4, 8});
  ConstTensorView gv = Contiguous<const void*>(g.data(), DType::kBF16, {8});
  TensorView yv = Contiguous<void*>(y.data(), DType::kBF16, {4, 8});
  AddNormOptions opt;
};

void ExpectAddError(const std::function<void(AddArgs&)>& mutate, const std::string& fragment) {
  AddArgs a;
  mutate(a);
  const auto r_before = a.r, y_before = a.y;
  try {
    AddRmsNorm(a.rv, a.dv, a.gv, a.yv, a.opt);
    ADD_FAILURE() << "no error; expected one containing \"" << fragment << "\"";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("AddRmsNorm: "));
    EXPECT_THAT(e.what(), HasSubstr(fragment));
  }
  EXPECT_EQ(r_before, a.r) << "residual written on failure";
  EXPECT_EQ(y_before, a.y) << "y written on failure";
}

TEST(AddRmsNorm, Errors) {
  ExpectAddError([](AddArgs& a) { a.dv.dtype = DType::kF16; },
                 "delta.dtype must be bf16 (residual's dtype), or bf16/f16 with an f32 residual, got f16");
  ExpectAddError([](AddArgs& a) { a.dv.shape[0] = 3; }, "delta shape must equal residual shape");
  ExpectAddError([](AddArgs& a) { a.yv.shape[1] = 4; }, "y shape must equal residual shape");
  ExpectAddError([](AddArgs& a) { a.gv.shape[0] = 7; }, "gamma length must equal the width 8");
  ExpectAddError([](AddArgs& a) { a.yv.data = a.rv.data; }, "y must not be the same memory as residual");
  ExpectAddError([](AddArgs& a) { a.dv.data = a.rv.data; },
                 "residual must not be the same memory as delta");
  ExpectAddError(
      [](AddArgs& a) { a.yv.data = static_cast<uint16_t*>(const_cast<void*>(a.dv.data)) + 1; },
      "y overlaps delta");
  ExpectAddError([](AddArgs& a) { a.yv.dtype = DType::kF32; },
                 "y.dtype must be bf16 in cast-then-scale mode");
  ExpectAddError([](AddArgs& a) { a.opt.eps = -1.0f; }, "eps must be finite and >= 0");
  ExpectAddError([](AddArgs& a) { a.gv.dtype = DType::kF16; },
                 "gamma.dtype must be f32 or delta's dtype bf16, got f16");
}

}  // namespace
}  // namespace glmnorm
