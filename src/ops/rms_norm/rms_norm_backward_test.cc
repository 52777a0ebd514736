// RmsNormBackward (and the forward's rstd) against the float64 oracle on
// every compiled SIMD target; the oracle against finite differences;
// determinism of dgamma across thread counts, executors and targets; errors,
// empty tensors and special values.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "glmnorm/glmnorm.h"
#include "ops/rms_norm/rms_norm_cases.h"
#include "ops/backward_test_util.h"
#include "reference/reference.h"
#include "support/test_support.h"

namespace glmnorm {
namespace {

using test::Buffer;
using ::testing::HasSubstr;

std::string Describe(const cases::NormDTypes& c, DType dx, int64_t width, const char* target) {
  return std::string(target) + " x=" + std::string(Name(c.x)) + " w=" + std::string(Name(c.w)) +
         " dy=" + std::string(Name(c.y)) + " dx=" + std::string(Name(dx)) +
         (c.rounding == Rounding::kCastThenScale ? " cast-then-scale" : " single") +
         " width=" + std::to_string(width);
}

// Random rows (each its own scale), gamma, dy; runs the backward; checks.
void RunCase(const cases::NormDTypes& c, DType dx_type, DType dg_type, int64_t rows,
             int64_t width, const NormOptions& opt, const std::string& what,
             bwdtest::Totals& totals, size_t misalign = 0) {
  Buffer x(c.x, rows * width, misalign), g(c.w, width, misalign), dy(c.y, rows * width, misalign);
  Buffer dx(dx_type, rows * width, misalign), dg(dg_type, width, misalign);
  bwdtest::FillRows(x, rows, width);
  test::FillGamma(g);
  bwdtest::FillRows(dy, rows, width);
  const auto xv = Contiguous<const void*>(x.data(), c.x, {rows, width});
  const auto gv = Contiguous<const void*>(g.data(), c.w, {width});
  const auto dyv = Contiguous<const void*>(dy.data(), c.y, {rows, width});
  const auto dxv = Contiguous<void*>(dx.data(), dx_type, {rows, width});
  const auto dgv = Contiguous<void*>(dg.data(), dg_type, {width});
  RmsNormBackward(xv, gv, dyv, dxv, dgv, opt);
  const auto ref = reference::RmsNormBackward(xv, gv, dyv, opt);
  bwdtest::CheckAgainstOracle(ref, AsConst(dxv), AsConst(dgv), what, totals);
}

TEST(RmsNormBackward, EveryComboEveryTarget) {
  test::Seed();
  bwdtest::Totals totals;
  test::ForEachTarget([&](const char* target) {
    for (const cases::NormDTypes& c : cases::RmsNormDTypes()) {
      NormOptions opt;
      opt.rounding = c.rounding;
      for (DType dx : {c.x, DType::kF32}) {
        if (dx == DType::kF32 && c.x == DType::kF32 && dx != c.x) continue;
        for (int64_t width : {1, 2, 3, 7, 15, 16, 17, 31, 33, 63, 64, 65, 127, 128, 129, 257,
                              1023, 4097, 5120}) {
          RunCase(c, dx, DType::kF32, 3, width, opt, Describe(c, dx, width, target), totals);
        }
        if (dx != c.x) break;
      }
    }
  });
  totals.ExpectBars("EveryComboEveryTarget");
}

// Rows spanning several dgamma blocks (partial last block), the Gemma
// offset, and dgamma rounded to bf16 / f16.
TEST(RmsNormBackward, ManyRowsOffsetAndDGammaDTypes) {
  bwdtest::Totals totals;
  test::ForEachTarget([&](const char* target) {
    for (const cases::NormDTypes& c : cases::CommonNormDTypes(false)) {
      for (float offset : {0.0f, 1.0f}) {
        for (DType dg : {DType::kF32, DType::kBF16, DType::kF16}) {
          NormOptions opt;
          opt.rounding = c.rounding;
          opt.weight_offset = offset;
          RunCase(c, c.x, dg, 2 * kDGammaRowBlock + 5, 129, opt,
                  Describe(c, c.x, 129, target) + " rows=133 offset=" +
                      std::to_string(offset) + " dgamma=" + std::string(Name(dg)),
                  totals);
        }
      }
    }
  });
  totals.ExpectBars("ManyRowsOffsetAndDGammaDTypes");
}

TEST(RmsNormBackward, MisalignedPointers) {
  bwdtest::Totals totals;
  test::ForEachTarget([&](const char* target) {
    for (const cases::NormDTypes& c : cases::CommonNormDTypes(false)) {
      NormOptions opt;
      opt.rounding = c.rounding;
      for (size_t mis : {1, 3}) {
        for (int64_t width : {33, 4097}) {
          RunCase(c, c.x, DType::kF32, 2, width, opt,
                  Describe(c, c.x, width, target) + " misalign=" + std::to_string(mis), totals,
                  mis);
        }
      }
    }
  });
  totals.ExpectBars("MisalignedPointers");
}

// 3-D strided views with padding: every element against the oracle, and
// nothing written outside dx.
TEST(RmsNormBackward, Strided3DViews) {
  bwdtest::Totals totals;
  test::ForEachTarget([&](const char* target) {
    for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (int64_t width : {5, 128, 1025}) {
        const int64_t xp = width + 9, dp = width + 3;
        Buffer x(t, 2 * 5 * xp), g(t, width), dy(t, 2 * 4 * dp), dx(t, 2 * 4 * dp),
            dg(DType::kF32, width);
        test::FillRandom(x);
        test::FillGamma(g);
        test::FillRandom(dy);
        for (size_t i = 0; i < dx.size; ++i) dx.Set(i, 768.0);
        const auto view3 = [&](auto* data, int64_t plane, int64_t pitch) {
          BasicTensorView<decltype(data)> v;
          v.data = data;
          v.dtype = t;
          v.rank = 3;
          v.shape[0] = 2, v.shape[1] = 3, v.shape[2] = width;
          v.stride[0] = plane * pitch, v.stride[1] = pitch, v.stride[2] = 1;
          return v;
        };
        const auto xv = view3(static_cast<const void*>(static_cast<const char*>(x.data()) +
                                                       2 * SizeOf(t)),
                              5, xp);
        const auto dyv = view3(static_cast<const void*>(dy.data()), 4, dp);
        const auto dxv = view3(dx.data(), 4, dp);
        const auto gv = Contiguous<const void*>(g.data(), t, {width});
        const auto dgv = Contiguous<void*>(dg.data(), DType::kF32, {width});
        RmsNormBackward(xv, gv, dyv, dxv, dgv);
        const auto ref = reference::RmsNormBackward(xv, gv, dyv, {});
        bwdtest::CheckAgainstOracle(ref, AsConst(dxv), AsConst(dgv),
                                    std::string(target) + " strided " + std::string(Name(t)),
                                    totals);
        int64_t touched = 0;
        for (int64_t b = 0; b < 2; ++b) {
          for (int64_t r = 0; r < 4; ++r) {
            for (int64_t i = 0; i < dp; ++i) {
              const bool inside = r < 3 && i < width;
              if (!inside && dx.Get(b * 4 * dp + r * dp + i) != 768.0) ++touched;
            }
          }
        }
        EXPECT_EQ(touched, 0) << target << " wrote outside the dx view";
      }
    }
  });
  totals.ExpectBars("Strided3DViews");
}

// The oracle's gradient formula against central finite differences of the
// float64 forward, on the unrounded maths (random rows, widths 1..300).
// Truncation error of the central difference ~(h / rms)^2 = 1e-8.
TEST(RmsNormBackward, ReferenceMatchesFiniteDifferences) {
  std::mt19937_64& rng = test::Rng();
  std::normal_distribution<double> normal;
  for (int64_t n : {1, 2, 5, 64, 300}) {
    for (double eps : {1e-5, 1e-6, 0.5}) {
      std::vector<double> x(n), g(n), w(n), dx(n), dg(n), y(n);
      for (int64_t i = 0; i < n; ++i) {
        x[i] = normal(rng) * 0.3;
        g[i] = 1.0 + 0.5 * normal(rng);
        w[i] = normal(rng);
      }
      reference::BackwardRowF64(x.data(), g.data(), w.data(), n, eps, dx.data(), dg.data());
      const auto loss = [&](const std::vector<double>& xs, const std::vector<double>& gs) {
        reference::ForwardRowF64(xs.data(), gs.data(), n, eps, y.data());
        double l = 0.0;
        for (int64_t i = 0; i < n; ++i) l += w[i] * y[i];
        return l;
      };
      // Differences are relative to the larger of the element and the rms
      // of its gradient vector (central differences with h = 1e-5 lose
      // ~1e-16 * |loss| / h absolutely, which swamps tiny elements).
      double rms_dx = 0.0, rms_dg = 0.0;
      for (int64_t i = 0; i < n; ++i) rms_dx += dx[i] * dx[i], rms_dg += dg[i] * dg[i];
      rms_dx = std::sqrt(rms_dx / double(n)), rms_dg = std::sqrt(rms_dg / double(n));
      double max_rel = 0.0;
      for (int64_t j = 0; j < n; ++j) {
        for (int which = 0; which < 2; ++which) {
          std::vector<double> xp = x, xm = x, gp = g, gm = g;
          // x: a step small against the row's rms (the length over which
          // y bends); gamma: L is linear in it.
          double ms = eps;
          for (int64_t i = 0; i < n; ++i) ms += x[i] * x[i] / double(n);
          const double h = which == 0 ? 1e-4 * std::sqrt(ms) : 1e-5;
          if (which == 0) {
            xp[j] += h, xm[j] -= h;
          } else {
            gp[j] += h, gm[j] -= h;
          }
          const double fd = (loss(xp, gp) - loss(xm, gm)) / (2 * h);
          const double an = which == 0 ? dx[j] : dg[j];
          const double rel =
              std::fabs(fd - an) / std::max(std::fabs(an), which == 0 ? rms_dx : rms_dg);
          max_rel = std::max(max_rel, rel);
          EXPECT_LT(rel, 1e-6) << "n=" << n << " eps=" << eps << " j=" << j
                               << (which ? " dgamma" : " dx") << " fd=" << fd << " an=" << an;
        }
      }
      std::printf("[fd] n=%lld eps=%g: max relative difference %.2e\n", (long long)n, eps,
                  max_rel);
    }
  }
}

// The view-level oracle reduces to the unrounded row maths in f32 single mode.
TEST(RmsNormBackward, ReferenceViewsAgreeWithRowMaths) {
  const int64_t n = 37;
  Buffer x(DType::kF32, n), g(DType::kF32, n), dy(DType::kF32, n);
  test::FillRandom(x);
  test::FillGamma(g);
  test::FillRandom(dy);
  NormOptions opt;
  opt.rounding = Rounding::kSingle;
  const auto ref = reference::RmsNormBackward(
      Contiguous<const void*>(x.data(), DType::kF32, {1, n}),
      Contiguous<const void*>(g.data(), DType::kF32, {n}),
      Contiguous<const void*>(dy.data(), DType::kF32, {1, n}), opt);
  std::vector<double> xd(n), gd(n), dyd(n), dx(n), dg(n);
  for (int64_t i = 0; i < n; ++i) xd[i] = x.Get(i), gd[i] = g.Get(i), dyd[i] = dy.Get(i);
  reference::BackwardRowF64(xd.data(), gd.data(), dyd.data(), n, opt.eps, dx.data(), dg.data());
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_NEAR(ref.dx[i], dx[i], 1e-12 * std::max(1.0, std::fabs(dx[i]))) << i;
    EXPECT_NEAR(ref.dgamma[i], dg[i], 1e-12 * std::max(1.0, std::fabs(dg[i]))) << i;
  }
}

// The forward's rstd: y's bits unchanged; the backward given rstd gives the
// same bits as the backward that recomputes it.
TEST(RmsNormBackward, ForwardRstdKeepsYAndFeedsTheBackward) {
  test::ForEachTarget([](const char* target) {
    for (const cases::NormDTypes& c : cases::RmsNormDTypes()) {
      const int64_t rows = 70, width = 257;
      NormOptions opt;
      opt.rounding = c.rounding;
      Buffer x(c.x, rows * width), g(c.w, width), y1(c.y, rows * width), y2(c.y, rows * width),
          rstd(DType::kF32, 2 * rows), dy(c.y, rows * width);
      bwdtest::FillRows(x, rows, width);
      test::FillGamma(g);
      bwdtest::FillRows(dy, rows, width);
      const auto xv = Contiguous<const void*>(x.data(), c.x, {rows, width});
      const auto gv = Contiguous<const void*>(g.data(), c.w, {width});
      TensorView rv = Contiguous<void*>(rstd.data(), DType::kF32, {rows});
      rv.stride[0] = 2;  // every other float
      RmsNorm(xv, gv, Contiguous<void*>(y1.data(), c.y, {rows, width}), opt);
      RmsNormWithRstd(xv, gv, Contiguous<void*>(y2.data(), c.y, {rows, width}), rv, opt);
      EXPECT_EQ(0, std::memcmp(y1.data(), y2.data(), rows * width * SizeOf(c.y)))
          << target << " rstd changed y";
      for (int64_t r = 0; r < rows; ++r) {
        double sum = 0;
        for (int64_t i = 0; i < width; ++i) sum += x.Get(r * width + i) * x.Get(r * width + i);
        const double want = 1.0 / std::sqrt(sum / width + opt.eps);
        EXPECT_NEAR(rstd.Get(2 * r), want, 4e-7 * want) << target << " row " << r;
      }
      Buffer dx1(c.x, rows * width), dx2(c.x, rows * width), dg1(DType::kF32, width),
          dg2(DType::kF32, width);
      const auto dyv = Contiguous<const void*>(dy.data(), c.y, {rows, width});
      RmsNormBackward(xv, gv, dyv, Contiguous<void*>(dx1.data(), c.x, {rows, width}),
                      Contiguous<void*>(dg1.data(), DType::kF32, {width}), opt);
      RmsNormBackward(xv, gv, dyv, Contiguous<void*>(dx2.data(), c.x, {rows, width}),
                      Contiguous<void*>(dg2.data(), DType::kF32, {width}), opt, AsConst(rv));
      EXPECT_EQ(0, std::memcmp(dx1.data(), dx2.data(), rows * width * SizeOf(c.x))) << target;
      EXPECT_EQ(0, std::memcmp(dg1.data(), dg2.data(), width * 4)) << target;
    }
  });
}

// dx and dgamma bits do not depend on the thread count, the executor, the
// SIMD target or the workspace (caller's or the arena).
TEST(RmsNormBackward, BitsIndependentOfThreadsExecutorTargetAndWorkspace) {
  const int saved = NumThreads();
  for (DType t : {DType::kBF16, DType::kF32}) {
    const int64_t rows = 1000, width = 5120;  // 16 blocks, well over the parallel threshold
    Buffer x(t, rows * width), g(t, width), dy(t, rows * width);
    bwdtest::FillRows(x, rows, width);
    test::FillGamma(g);
    bwdtest::FillRows(dy, rows, width);
    const auto xv = Contiguous<const void*>(x.data(), t, {rows, width});
    const auto gv = Contiguous<const void*>(g.data(), t, {width});
    const auto dyv = Contiguous<const void*>(dy.data(), t, {rows, width});
    std::vector<uint8_t> want_dx, want_dg;
    std::vector<uint8_t> ws(NormBackwardWorkspaceBytes(rows, width) + 3);
    const auto run = [&](const std::string& what, const Execution& exec, const Workspace& w) {
      Buffer dx(t, rows * width), dg(DType::kF32, width);
      RmsNormBackward(xv, gv, dyv, Contiguous<void*>(dx.data(), t, {rows, width}),
                      Contiguous<void*>(dg.data(), DType::kF32, {width}), {}, {}, w, exec);
      std::vector<uint8_t> got_dx(static_cast<const uint8_t*>(dx.data()),
                                  static_cast<const uint8_t*>(dx.data()) + rows * width * SizeOf(t));
      std::vector<uint8_t> got_dg(static_cast<const uint8_t*>(dg.data()),
                                  static_cast<const uint8_t*>(dg.data()) + width * 4);
      if (want_dx.empty()) {
        want_dx = got_dx, want_dg = got_dg;
        return;
      }
      EXPECT_TRUE(got_dx == want_dx) << Name(t) << " " << what << ": dx bits differ";
      EXPECT_TRUE(got_dg == want_dg) << Name(t) << " " << what << ": dgamma bits differ";
    };
    for (int threads : {1, 2, 3, 8}) {
      SetNumThreads(threads);
      run("threads=" + std::to_string(threads), {}, {});
      run("threads=" + std::to_string(threads) + " caller workspace (misaligned)", {},
          Workspace{ws.data() + 3, ws.size() - 3});
    }
    SetNumThreads(saved);
    const Executor serial = SerialExecutor();
    Execution on_caller;
    on_caller.executor = &serial;
    run("serial executor", on_caller, {});
    test::ForEachTarget([&](const char* target) { run(target, {}, {}); });
  }
  SetNumThreads(saved);
}

// bf16 rows of 64 values or more (their whole 64-value chunks: heads of 128,
// and the whole canonical blocks of wide rows) take the pair layout of the
// AVX-512 target where the CPU has AVX512-BF16 (rms_norm_backward_cpu.cc: rows whose
// products BackwardPairRowOk proves free of subnormals, without NaN; the
// others the per-vector path). Every target gives the same dx, d_delta and
// dgamma bits, in calls that mix admitted and refused rows: a tiny x (h
// below 2^-125), a subnormal dy, tiny x and dy together, NaN and inf in x
// and dy, zero rows; with and without the
// forward's rstd, an offset, widths with a tail, d_residual_out
// (AddRmsNormBackward), misaligned tensors, and dx large enough for
// streaming stores.
TEST(RmsNormBackward, Bf16PairRowsSameBitsOnEveryTarget) {
  test::Seed();
  const DType t = DType::kBF16;
  struct Shape {
    int64_t rows, width;
  };
  // 128 and 200: chunks and a tail, no whole block; 1100: two blocks, a
  // chunk and a tail; 16400x128: heads with streamed dx (4 MiB).
  for (const Shape shape : {Shape{24, 128}, Shape{24, 200}, Shape{24, 512}, Shape{24, 1100},
                            Shape{24, 5120}, Shape{420, 5120}, Shape{16400, 128}}) {
    const int64_t rows = shape.rows, width = shape.width, n = rows * width;
    for (size_t misalign : {0, 1}) {
      Buffer x(t, n, misalign), g(t, width, misalign), dy(t, n, misalign), dres(t, n, misalign);
      bwdtest::FillRows(x, rows, width);
      test::FillGamma(g);
      bwdtest::FillRows(dy, rows, width);
      bwdtest::FillRows(dres, rows, width);
      const auto at = [width](int64_t row, int64_t col) { return size_t(row * width + col); };
      // One kind of non-finite value per row: where a row's terms hold two
      // different NaNs (a NaN dy beside an inf one, or a +NaN beside a -NaN),
      // which one survives differs between SCALAR and AVX3 in some builds
      // (-O1 under the sanitizers; before this path too: docs/BACKWARD.md
      // "Special values").
      // Each flush the native conversion would make shows in the output:
      // columns 5 and 7 of dgamma get only the tiny rows' terms (dy is 0
      // there elsewhere), and dx = rr * dh where x is 0.
      for (int64_t r = 0; r < rows; ++r) dy.Set(at(r, 5), 0.0), dy.Set(at(r, 7), 0.0);
      for (int64_t r = 0; r + 10 <= rows; r += 10) {
        x.Set(at(r + 1, 7), 1e-38);  // h = x * r below 2^-125
        dy.Set(at(r + 1, 7), 1.0);
        dy.Set(at(r + 2, 100), 1e-39);  // a subnormal dy
        x.Set(at(r + 2, 100), 0.0);
        x.Set(at(r + 3, 5), 1e-19);  // dy * bf16(h) below 2^-124
        dy.Set(at(r + 3, 5), 1e-19);
        x.Set(at(r + 4, 3), std::nan(""));  // a NaN, an inf in x; in dy
        x.Set(at(r + 5, 9), INFINITY);
        dy.Set(at(r + 6, 11), -INFINITY);
        dy.Set(at(r + 9, 12), std::nan(""));
        for (int64_t i = 0; i < width; ++i) {
          dy.Set(at(r + 7, i), 0.0);  // a zero dy row, then a zero x row
          x.Set(at(r + 8, i), 0.0);
        }
      }
      const auto xv = Contiguous<const void*>(x.data(), t, {rows, width});
      const auto gv = Contiguous<const void*>(g.data(), t, {width});
      const auto dyv = Contiguous<const void*>(dy.data(), t, {rows, width});
      for (float offset : {0.0f, 1.0f}) {
        if (offset != 0.0f && rows > 100) continue;  // the streaming shape: once is enough
        for (bool with_rstd : {false, true}) {
          for (bool add : {false, true}) {
            NormOptions opt;
            opt.weight_offset = offset;
            const std::string what =
                "rows=" + std::to_string(rows) + " width=" + std::to_string(width) +
                " misalign=" + std::to_string(misalign) + " offset=" + std::to_string(offset) +
                (with_rstd ? " rstd" : "") + (add ? " add" : "");
            test::ExpectSameBitsOnEveryTarget(what, [&](const char*) {
              // dx 64-byte aligned (then offset by misalign), as large tensors
              // are: the streamed pair stores need it.
              Buffer dx_bytes(t, n + 64), dd(t, n, misalign), dg(DType::kF32, width);
              const uintptr_t start = reinterpret_cast<uintptr_t>(dx_bytes.data());
              void* const dx =
                  reinterpret_cast<void*>((start + 63) / 64 * 64 + misalign * SizeOf(t));
              Buffer y(t, n), rstd(DType::kF32, rows);
              const auto rv = Contiguous<void*>(rstd.data(), DType::kF32, {rows});
              if (with_rstd)
                RmsNormWithRstd(xv, gv, Contiguous<void*>(y.data(), t, {rows, width}), rv, opt);
              const ConstTensorView rstd_view = with_rstd ? AsConst(rv) : ConstTensorView{};
              const auto dxv = Contiguous<void*>(dx, t, {rows, width});
              const auto dgv = Contiguous<void*>(dg.data(), DType::kF32, {width});
              if (add) {
                AddNormOptions aopt;
                aopt.weight_offset = offset;
                AddRmsNormBackward(
                    xv, gv, dyv, Contiguous<const void*>(dres.data(), t, {rows, width}), dxv,
                    Contiguous<void*>(dd.data(), t, {rows, width}), dgv, aopt, rstd_view);
              } else {
                RmsNormBackward(xv, gv, dyv, dxv, dgv, opt, rstd_view);
              }
              std::vector<uint8_t> bytes = test::BytesOf(dx, n * SizeOf(t));
              const std::vector<uint8_t> more[] = {test::BytesOf(dg.data(), width * 4),
                                                   test::BytesOf(dd.data(), n * SizeOf(t))};
              for (const auto& m : more) bytes.insert(bytes.end(), m.begin(), m.end());
              return bytes;
            });
          }
        }
      }
    }
  }
}

// In place: dx written over dy gives the same bits.
TEST(RmsNormBackward, InPlaceOverDy) {
  test::ForEachTarget([](const char* target) {
    for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
      const int64_t rows = 5, width = 300;
      Buffer x(t, rows * width), g(t, width), dy(t, rows * width), dx(t, rows * width),
          dg(DType::kF32, width);
      test::FillRandom(x);
      test::FillGamma(g);
      test::FillRandom(dy);
      const auto xv = Contiguous<const void*>(x.data(), t, {rows, width});
      const auto gv = Contiguous<const void*>(g.data(), t, {width});
      const auto dgv = Contiguous<void*>(dg.data(), DType::kF32, {width});
      RmsNormBackward(xv, gv, Contiguous<const void*>(dy.data(), t, {rows, width}),
                      Contiguous<void*>(dx.data(), t, {rows, width}), dgv);
      const auto dyv = Contiguous<void*>(dy.data(), t, {rows, width});
      RmsNormBackward(xv, gv, AsConst(dyv), dyv, dgv);
      EXPECT_EQ(0, std::memcmp(dx.data(), dy.data(), rows * width * SizeOf(t)))
          << target << " " << Name(t);
    }
  });
}

// ------------------------------------------------------------------ errors

struct Args {
  Buffer x{DType::kBF16, 32}, g{DType::kBF16, 8}, dy{DType::kBF16, 32}, dx{DType::kBF16, 32},
      dg{DType::kF32, 8}, rstd{DType::kF32, 4};
  ConstTensorView xv = Contiguous<const void*>(x.data(), DType::kBF16, {4, 8});
  ConstTensorView gv = Contiguous<const void*>(g.data(), DType::kBF16, {8});
  ConstTensorView dyv = Contiguous<const void*>(dy.data(), DType::kBF16, {4, 8});
  TensorView dxv = Contiguous<void*>(dx.data(), DType::kBF16, {4, 8});
  TensorView dgv = Contiguous<void*>(dg.data(), DType::kF32, {8});
  ConstTensorView rv;
  NormOptions opt;
  Workspace ws;
};

void ExpectError(const std::function<void(Args&)>& mutate, const std::string& fragment) {
  Args a;
  mutate(a);
  for (size_t i = 0; i < a.dx.bytes.size(); ++i) a.dx.bytes[i] = 0x5A;
  try {
    RmsNormBackward(a.xv, a.gv, a.dyv, a.dxv, a.dgv, a.opt, a.rv, a.ws);
    ADD_FAILURE() << "no error; expected: " << fragment;
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("RmsNormBackward: "));
    EXPECT_THAT(e.what(), HasSubstr(fragment));
  }
  for (size_t i = 0; i < a.dx.bytes.size(); ++i) {
    ASSERT_EQ(a.dx.bytes[i], 0x5A) << "dx written before the error: " << fragment;
  }
}

TEST(RmsNormBackwardErrors, NameTheArgumentAndTheExpectation) {
  ExpectError([](Args& a) { a.dyv.dtype = DType::kF16; },
              "dy.dtype must be bf16 in cast-then-scale mode");
  ExpectError([](Args& a) { a.dxv.dtype = DType::kF16; }, "dx.dtype must be bf16 (x's dtype) or f32");
  ExpectError([](Args& a) { a.dxv.shape[0] = 3; }, "dx shape must equal x shape [4, 8]");
  ExpectError([](Args& a) { a.dyv.shape[1] = 7; }, "dy shape must equal x shape");
  ExpectError([](Args& a) { a.dgv.shape[0] = 7; }, "dgamma length must equal the width 8, got 7");
  ExpectError([](Args& a) { a.dgv.dtype = DType::kI8; }, "dgamma.dtype must be f32, bf16 or f16");
  ExpectError([](Args& a) { a.gv.shape[0] = 9; }, "gamma length must equal the width 8");
  ExpectError([](Args& a) { a.opt.eps = -1.0f; }, "eps must be finite and >= 0");
  ExpectError([](Args& a) { a.dxv.data = const_cast<void*>(a.xv.data); },
              "dx must not be the same memory as x");
  ExpectError(
      [](Args& a) {
        a.rv = Contiguous<const void*>(a.rstd.data(), DType::kF32, {3});
      },
      "rstd must be 1-D of length rows 4, got shape [3]");
  ExpectError(
      [](Args& a) {
        a.rv = Contiguous<const void*>(a.rstd.data(), DType::kBF16, {4});
      },
      "rstd.dtype must be f32, got bf16");
  ExpectError(
      [](Args& a) {
        // NaN and +inf are what the forward saves for a NaN row and a zero row
        // with eps 0: accepted. A negative 1/rms cannot come from it.
        const float v[4] = {1.0f, std::nanf(""), INFINITY, -0.5f};
        std::memcpy(a.rstd.data(), v, sizeof(v));
        a.rv = Contiguous<const void*>(a.rstd.data(), DType::kF32, {4});
      },
      "rstd[3] must be >= 0 or NaN (1/rms as RmsNormWithRstd saves it), got -0.5");
  ExpectError([](Args& a) { a.ws = Workspace{a.rstd.data(), 8}; },
              "workspace.bytes must be at least");
  ExpectError([](Args& a) { a.dgv.data = a.dx.data(); }, "dgamma overlaps dx");
}

// ------------------------------------------------------------ empty, specials

TEST(RmsNormBackward, EmptyTensors) {
  // 0 rows: dgamma is zeros, dx untouched; null data allowed for empty views.
  Buffer g(DType::kBF16, 8), dg(DType::kBF16, 8);
  for (size_t i = 0; i < 8; ++i) dg.Set(i, 5.0);
  const auto xv = Contiguous<const void*>(nullptr, DType::kBF16, {0, 8});
  RmsNormBackward(xv, Contiguous<const void*>(g.data(), DType::kBF16, {8}), xv,
                  Contiguous<void*>(nullptr, DType::kBF16, {0, 8}),
                  Contiguous<void*>(dg.data(), DType::kBF16, {8}));
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ(dg.Get(i), 0.0) << i;
  // Width 0: nothing to do.
  RmsNormBackward(Contiguous<const void*>(nullptr, DType::kF32, {3, 0}),
                  Contiguous<const void*>(nullptr, DType::kF32, {0}),
                  Contiguous<const void*>(nullptr, DType::kF32, {3, 0}),
                  Contiguous<void*>(nullptr, DType::kF32, {3, 0}),
                  Contiguous<void*>(nullptr, DType::kF32, {0}));
  EXPECT_EQ(NormBackwardWorkspaceBytes(0, 5120), 0u);
  // 65 rows: 9 leaves of 8 (dgamma sums), 2 blocks of 64 (xf and dh rows).
  EXPECT_EQ(NormBackwardWorkspaceBytes(65, 17), size_t((9 + 2 * 2) * 32 * 4 + 64));
}

// A zero row: finite dx = r * dh (x̂ = 0), as the oracle. A NaN in one dy
// element: that row's dx is NaN (c is), other rows finite; dgamma NaN only in
// that column. An inf in x: its row's dx NaN; other rows finite.
TEST(RmsNormBackward, SpecialValues) {
  test::ForEachTarget([](const char* target) {
    for (DType t : {DType::kF32, DType::kBF16}) {
      const int64_t rows = 4, width = 40;
      Buffer x(t, rows * width), g(t, width), dy(t, rows * width), dx(t, rows * width),
          dg(DType::kF32, width);
      test::FillRandom(x);
      test::FillGamma(g);
      test::FillRandom(dy);
      for (int64_t i = 0; i < width; ++i) x.Set(i, 0.0);      // row 0: zeros
      dy.Set(1 * width + 5, std::nan(""));                    // row 1: a NaN gradient
      x.Set(2 * width + 7, std::numeric_limits<double>::infinity());  // row 2: inf input
      const auto xv = Contiguous<const void*>(x.data(), t, {rows, width});
      const auto gv = Contiguous<const void*>(g.data(), t, {width});
      const auto dyv = Contiguous<const void*>(dy.data(), t, {rows, width});
      RmsNormBackward(xv, gv, dyv, Contiguous<void*>(dx.data(), t, {rows, width}),
                      Contiguous<void*>(dg.data(), DType::kF32, {width}));
      const double r0 = 1.0 / std::sqrt(double(kGlmRmsNormEps));
      for (int64_t i = 0; i < width; ++i) {
        const double want = r0 * static_cast<double>(static_cast<float>(dy.Get(i) * g.Get(i)));
        const double want_t = t == DType::kF32 ? want : reference::RoundTo(t, want);
        EXPECT_NEAR(dx.Get(i), want_t, std::fabs(want_t) * (t == DType::kF32 ? 1e-6 : 8e-3))
            << target << " zero row col " << i;
        EXPECT_TRUE(std::isnan(dx.Get(width + i))) << target << " NaN-dy row col " << i;
        EXPECT_TRUE(std::isfinite(dx.Get(3 * width + i))) << target << " clean row col " << i;
        EXPECT_EQ(std::isnan(dg.Get(i)), i == 5 || i == 7)
            << target << " dgamma col " << i;
      }
      int64_t nan_row2 = 0;
      for (int64_t i = 0; i < width; ++i) nan_row2 += std::isnan(dx.Get(2 * width + i));
      EXPECT_GT(nan_row2, 0) << target << " inf input row gave a finite gradient";
    }
  });
}

}  // namespace
}  // namespace glmnorm

namespace glmnorm {
namespace {

// The forwards that save rstd check it like every other argument.
TEST(RmsNormBackwardErrors, ForwardRstdArgument) {
  Buffer x(DType::kBF16, 32), g(DType::kBF16, 8), y(DType::kBF16, 32), r(DType::kF32, 8);
  const auto xv = Contiguous<const void*>(x.data(), DType::kBF16, {4, 8});
  const auto gv = Contiguous<const void*>(g.data(), DType::kBF16, {8});
  const auto yv = Contiguous<void*>(y.data(), DType::kBF16, {4, 8});
  const auto expect = [](const std::function<void()>& call, const std::string& fragment) {
    try {
      call();
      ADD_FAILURE() << "no error; expected " << fragment;
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(fragment));
    }
  };
  expect([&] { RmsNormWithRstd(xv, gv, yv, Contiguous<void*>(r.data(), DType::kF32, {3})); },
         "RmsNormWithRstd: rstd must be 1-D of length rows 4, got shape [3]");
  expect([&] { RmsNormWithRstd(xv, gv, yv, Contiguous<void*>(r.data(), DType::kBF16, {4})); },
         "RmsNormWithRstd: rstd.dtype must be f32, got bf16");
  TensorView zero_stride = Contiguous<void*>(r.data(), DType::kF32, {4});
  zero_stride.stride[0] = 0;
  expect([&] { RmsNormWithRstd(xv, gv, yv, zero_stride); },
         "RmsNormWithRstd: rstd.stride[0] must be >= 1 for 4 rows, got 0");
  expect([&] { RmsNormWithRstd(xv, gv, yv, Contiguous<void*>(y.data(), DType::kF32, {4})); },
         "RmsNormWithRstd: rstd overlaps y");
  Buffer res(DType::kBF16, 32);
  expect([&] {
    AddRmsNormWithRstd(Contiguous<void*>(res.data(), DType::kBF16, {4, 8}), xv, gv, yv,
                       Contiguous<void*>(r.data(), DType::kF32, {5}));
  }, "AddRmsNormWithRstd: rstd must be 1-D of length rows 4, got shape [5]");
}

}  // namespace
}  // namespace glmnorm
