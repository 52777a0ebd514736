// AddRmsNormBackward against the oracle (RmsNormBackward's of the norm of h,
// with d_residual_out added) on every target; d_delta; in place; errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "glmnorm/glmnorm.h"
#include "ops/backward_test_util.h"
#include "reference/reference.h"
#include "support/test_support.h"

namespace glmnorm {
namespace {

using test::Buffer;

TEST(AddRmsNormBackward, MatchesOracleEveryTarget) {
  test::Seed();
  bwdtest::Totals totals;
  test::ForEachTarget([&](const char* target) {
    // (residual R, delta) as the forward accepts them.
    const std::pair<DType, DType> kTypes[] = {{DType::kBF16, DType::kBF16},
                                              {DType::kF16, DType::kF16},
                                              {DType::kF32, DType::kF32},
                                              {DType::kF32, DType::kBF16}};
    for (auto [rt, dt] : kTypes) {
      for (Rounding rounding : {Rounding::kCastThenScale, Rounding::kSingle}) {
        for (int64_t width : {1, 31, 128, 5120}) {
          const int64_t rows = 67;
          AddNormOptions opt;
          opt.rounding = rounding;
          const DType gt = dt;  // gamma in the activations' dtype
          const DType yt = rounding == Rounding::kCastThenScale ? Promote(gt, rt) : rt;
          Buffer res(rt, rows * width), del(dt, rows * width), g(gt, width), y(yt, rows * width),
              rstd(DType::kF32, rows), dy(yt, rows * width), dres(rt, rows * width),
              dh(rt, rows * width), dd(dt, rows * width), dg(DType::kF32, width);
          bwdtest::FillRows(res, rows, width);
          bwdtest::FillRows(del, rows, width);
          test::FillGamma(g);
          bwdtest::FillRows(dy, rows, width);
          bwdtest::FillRows(dres, rows, width);
          const auto rv = Contiguous<void*>(res.data(), rt, {rows, width});
          const auto gv = Contiguous<const void*>(g.data(), gt, {width});
          AddRmsNormWithRstd(rv, Contiguous<const void*>(del.data(), dt, {rows, width}), gv,
                             Contiguous<void*>(y.data(), yt, {rows, width}),
                             Contiguous<void*>(rstd.data(), DType::kF32, {rows}), opt);
          const auto hv = AsConst(rv);
          const auto dyv = Contiguous<const void*>(dy.data(), yt, {rows, width});
          const auto dresv = Contiguous<const void*>(dres.data(), rt, {rows, width});
          const auto dhv = Contiguous<void*>(dh.data(), rt, {rows, width});
          TensorView ddv;
          if (dt != rt) ddv = Contiguous<void*>(dd.data(), dt, {rows, width});
          const auto dgv = Contiguous<void*>(dg.data(), DType::kF32, {width});
          AddRmsNormBackward(hv, gv, dyv, dresv, dhv, ddv, dgv, opt,
                             Contiguous<const void*>(rstd.data(), DType::kF32, {rows}));
          const std::string what = std::string(target) + " R=" + std::string(Name(rt)) +
                                   " delta=" + std::string(Name(dt)) +
                                   (rounding == Rounding::kSingle ? " single" : " cast") +
                                   " width=" + std::to_string(width);
          const auto ref = reference::RmsNormBackward(hv, gv, dyv, opt, dresv);
          bwdtest::CheckAgainstOracle(ref, AsConst(dhv), AsConst(dgv), what, totals);
          if (dt != rt) {
            // d_delta is d_h's float32 value rounded once to delta's dtype.
            int64_t wrong = 0;
            for (int64_t i = 0; i < rows * width; ++i) {
              uint32_t want = 0;
              reference::Store(&want, dt, 0, dh.Get(i));
              wrong += std::memcmp(&want, static_cast<char*>(dd.data()) + i * SizeOf(dt),
                                   SizeOf(dt)) != 0;
            }
            EXPECT_EQ(wrong, 0) << what << ": d_delta is not d_h rounded";
          }
          // In place over d_residual_out: the same bits.
          Buffer dres2 = dres;
          const auto inplace = Contiguous<void*>(dres2.data(), rt, {rows, width});
          AddRmsNormBackward(hv, gv, dyv, AsConst(inplace), inplace, {}, dgv, opt);
          EXPECT_EQ(0, std::memcmp(dres2.data(), dh.data(), rows * width * SizeOf(rt)))
              << what << ": in place differs";
        }
      }
    }
  });
  totals.ExpectBars("AddRmsNormBackward");
}

// No incoming residual gradient (rank 0) is RmsNormBackward's dx.
TEST(AddRmsNormBackward, WithoutResidualGradientIsRmsNormBackward) {
  test::ForEachTarget([](const char* target) {
    const int64_t rows = 9, width = 300;
    const DType t = DType::kBF16;
    Buffer h(t, rows * width), g(t, width), dy(t, rows * width), a(t, rows * width),
        b(t, rows * width), dga(DType::kF32, width), dgb(DType::kF32, width);
    test::FillRandom(h);
    test::FillGamma(g);
    test::FillRandom(dy);
    const auto hv = Contiguous<const void*>(h.data(), t, {rows, width});
    const auto gv = Contiguous<const void*>(g.data(), t, {width});
    const auto dyv = Contiguous<const void*>(dy.data(), t, {rows, width});
    AddRmsNormBackward(hv, gv, dyv, {}, Contiguous<void*>(a.data(), t, {rows, width}), {},
                       Contiguous<void*>(dga.data(), DType::kF32, {width}));
    RmsNormBackward(hv, gv, dyv, Contiguous<void*>(b.data(), t, {rows, width}),
                    Contiguous<void*>(dgb.data(), DType::kF32, {width}));
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), rows * width * 2)) << target;
    EXPECT_EQ(0, std::memcmp(dga.data(), dgb.data(), width * 4)) << target;
  });
}

TEST(AddRmsNormBackward, Errors) {
  const int64_t rows = 2, width = 8;
  Buffer h(DType::kBF16, 16), g(DType::kBF16, 8), dy(DType::kBF16, 16), dres(DType::kF32, 16),
      dh(DType::kBF16, 16), dg(DType::kF32, 8);
  const auto hv = Contiguous<const void*>(h.data(), DType::kBF16, {rows, width});
  const auto gv = Contiguous<const void*>(g.data(), DType::kBF16, {width});
  const auto dyv = Contiguous<const void*>(dy.data(), DType::kBF16, {rows, width});
  const auto dhv = Contiguous<void*>(dh.data(), DType::kBF16, {rows, width});
  const auto dgv = Contiguous<void*>(dg.data(), DType::kF32, {width});
  const auto expect = [](const std::function<void()>& call, const std::string& fragment) {
    try {
      call();
      ADD_FAILURE() << "no error; expected " << fragment;
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr("AddRmsNormBackward: " + fragment));
    }
  };
  expect([&] {
    AddRmsNormBackward(hv, gv, dyv, Contiguous<const void*>(dres.data(), DType::kF32, {rows, width}),
                       dhv, {}, dgv);
  }, "d_residual_out.dtype must be bf16 (d_h's dtype), got f32");
  expect([&] {
    AddRmsNormBackward(hv, gv, dyv, {}, Contiguous<void*>(dres.data(), DType::kF32, {rows, width}),
                       {}, dgv);
  }, "d_h.dtype must be bf16 (the residual's dtype), got f32");
  expect([&] {
    AddNormOptions opt;
    opt.normalize_rounded_sum = false;
    AddRmsNormBackward(hv, gv, dyv, {}, dhv, {}, dgv, opt);
  }, "options.normalize_rounded_sum must be true for a bf16 residual");
  expect([&] {
    AddRmsNormBackward(hv, gv, dyv, {}, dhv, {}, Contiguous<void*>(dg.data(), DType::kF32, {4}));
  }, "dgamma length must equal the width 8, got 4");
}

}  // namespace
}  // namespace glmnorm
