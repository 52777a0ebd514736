// RmsNorm against the float64 oracle on every compiled SIMD target, plus the
// invariance guarantees (target, batch, position, alignment, threads).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "glmnorm/glmnorm.h"
#include "ops/rms_norm/rms_norm_cases.h"
#include "reference/reference.h"
#include "support/test_support.h"

namespace glmnorm {
namespace {

using test::Buffer;

// The case table (rms_norm_cases.h).
using Combo = cases::NormDTypes;
const std::vector<int64_t>& Widths() { return cases::RmsNormTestWidths(); }
std::vector<Combo> AllCombos() { return cases::RmsNormDTypes(); }

std::string Describe(const Combo& c, int64_t width, const char* target) {
  return std::string(target) + " x=" + std::string(Name(c.x)) + " w=" + std::string(Name(c.w)) +
         " y=" + std::string(Name(c.y)) +
         (c.rounding == Rounding::kCastThenScale ? " cast-then-scale" : " single") +
         " width=" + std::to_string(width);
}

// Runs one case: rows x width, checks against the oracle.
void CheckCase(const Combo& c, int64_t rows, int64_t width, const NormOptions& opt,
               const std::string& what, size_t misalign = 0) {
  Buffer x(c.x, rows * width, misalign), g(c.w, width, misalign), y(c.y, rows * width, misalign);
  for (int64_t r = 0; r < rows; ++r) {
    Buffer row(c.x, width);
    test::FillRandom(row);
    std::memcpy(static_cast<char*>(x.data()) + r * width * SizeOf(c.x), row.data(),
                width * SizeOf(c.x));
  }
  test::FillGamma(g);
  const auto xv = Contiguous<const void*>(x.data(), c.x, {rows, width});
  const auto gv = Contiguous<const void*>(g.data(), c.w, {width});
  const auto yv = Contiguous<void*>(y.data(), c.y, {rows, width});
  RmsNorm(xv, gv, yv, opt);
  const auto stats = test::CompareWithOracle(xv, gv, AsConst(yv), opt, test::UlpLimit(c.y));
  EXPECT_EQ(stats.over_limit, 0) << what << ": max ulp " << stats.max_ulp << ", first "
                                 << stats.first_failure;
}

TEST(RmsNorm, EveryWidthEveryComboEveryTarget) {
  test::Seed();
  test::ForEachTarget([](const char* target) {
    for (const Combo& c : AllCombos()) {
      NormOptions opt;
      opt.rounding = c.rounding;
      for (int64_t width : Widths()) CheckCase(c, 3, width, opt, Describe(c, width, target));
    }
  });
}

// A NaN gamma lane next to a lane whose y is subnormal, in one 16-lane vector
// on the fast path: the native bf16 store must fall back to the NaN-safe
// portable rounding for that vector (convert-inl.h), and every target must
// give the oracle's bits.
TEST(RmsNorm, NaNGammaNextToSubnormalOutput) {
  const int64_t rows = 2, width = 48;
  Buffer x(DType::kBF16, rows * width), g(DType::kBF16, width), want(DType::kBF16, rows * width);
  for (int64_t i = 0; i < rows * width; ++i) x.Set(i, 0.5 + 0.01 * double(i % 7));
  for (int64_t i = 0; i < width; ++i) g.Set(i, 1.0 + 0.001 * double(i));
  g.Set(0, std::nan(""));
  g.Set(1, 1e-39);  // y ~ 1e-39: a subnormal float and bf16
  g.Set(17, -3e-40);
  const auto xv = Contiguous<const void*>(x.data(), DType::kBF16, {rows, width});
  const auto gv = Contiguous<const void*>(g.data(), DType::kBF16, {width});
  reference::RmsNorm(xv, gv, Contiguous<void*>(want.data(), DType::kBF16, {rows, width}), {});
  test::ForEachTarget([&](const char* target) {
    Buffer y(DType::kBF16, rows * width);
    RmsNorm(xv, gv, Contiguous<void*>(y.data(), DType::kBF16, {rows, width}));
    const test::UlpStats s = test::CompareUlp(DType::kBF16, y.data(), want.data(), rows * width);
    EXPECT_EQ(s.nan_mismatches, 0) << target;
    EXPECT_LE(s.max_ulp, 1) << target << " first difference at " << s.first_difference;
    EXPECT_TRUE(std::isnan(y.Get(0)) && std::isnan(y.Get(width))) << target;
    EXPECT_NE(y.Get(1), 0.0) << target << ": the subnormal y was flushed to zero";
  });
}

TEST(RmsNorm, GemmaWeightOffset) {
  test::ForEachTarget([](const char* target) {
    for (const Combo& c : AllCombos()) {
      NormOptions opt;
      opt.rounding = c.rounding;
      opt.weight_offset = 1.0f;
      for (int64_t width : {7, 128, 5121}) {
        CheckCase(c, 2, width, opt, Describe(c, width, target) + " offset=1");
      }
    }
  });
}

TEST(RmsNorm, MisalignedPointers) {
  test::ForEachTarget([](const char* target) {
    for (const Combo& c : AllCombos()) {
      NormOptions opt;
      opt.rounding = c.rounding;
      for (size_t mis : {1, 3, 7}) {
        for (int64_t width : {33, 129, 4097}) {
          CheckCase(c, 2, width, opt,
                    Describe(c, width, target) + " misalign=" + std::to_string(mis), mis);
        }
      }
    }
  });
}

// x is a [2, 3, width] slice of a padded [2, 5, width + 9] buffer; y has its
// own padding. Checks every element against the oracle and that padding is
// untouched.
TEST(RmsNorm, Strided3DViews) {
  test::ForEachTarget([](const char* target) {
    for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (int64_t width : {5, 128, 1025}) {
        const int64_t xp = width + 9, yp = width + 3;
        Buffer x(t, 2 * 5 * xp), g(t, width), y(t, 2 * 4 * yp);
        test::FillRandom(x);
        test::FillGamma(g);
        for (size_t i = 0; i < y.size; ++i) y.Set(i, 768.0);
        ConstTensorView xv;
        xv.data = static_cast<const char*>(x.data()) + 2 * SizeOf(t);  // skip 2 columns
        xv.dtype = t;
        xv.rank = 3;
        xv.shape[0] = 2, xv.shape[1] = 3, xv.shape[2] = width;
        xv.stride[0] = 5 * xp, xv.stride[1] = xp, xv.stride[2] = 1;
        TensorView yv;
        yv.data = y.data();
        yv.dtype = t;
        yv.rank = 3;
        yv.shape[0] = 2, yv.shape[1] = 3, yv.shape[2] = width;
        yv.stride[0] = 4 * yp, yv.stride[1] = yp, yv.stride[2] = 1;
        const auto gv = Contiguous<const void*>(g.data(), t, {width});
        RmsNorm(xv, gv, yv);
        const auto stats = test::CompareWithOracle(xv, gv, AsConst(yv), {}, test::UlpLimit(t));
        EXPECT_EQ(stats.over_limit, 0)
            << target << " " << Name(t) << " width " << width << ": " << stats.first_failure;
        // Padding columns and the 4th row of each y block are untouched.
        int64_t touched = 0;
        for (int64_t b = 0; b < 2; ++b) {
          for (int64_t r = 0; r < 4; ++r) {
            for (int64_t i = 0; i < yp; ++i) {
              const bool inside = r < 3 && i < width;
              if (!inside && y.Get(b * 4 * yp + r * yp + i) != 768.0) ++touched;
            }
          }
        }
        EXPECT_EQ(touched, 0) << target << " wrote outside the y view";
      }
    }
  });
}

// In place (y is x) gives the same bits as out of place.
TEST(RmsNorm, InPlaceMatchesOutOfPlace) {
  test::ForEachTarget([](const char* target) {
    for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (Rounding rounding : {Rounding::kCastThenScale, Rounding::kSingle}) {
        const int64_t rows = 4, width = 1000;
        Buffer x(t, rows * width), g(t, width), y(t, rows * width);
        test::FillRandom(x);
        test::FillGamma(g);
        NormOptions opt;
        opt.rounding = rounding;
        const auto gv = Contiguous<const void*>(g.data(), t, {width});
        RmsNorm(Contiguous<const void*>(x.data(), t, {rows, width}), gv,
                Contiguous<void*>(y.data(), t, {rows, width}), opt);
        const auto xv = Contiguous<void*>(x.data(), t, {rows, width});
        RmsNorm(AsConst(xv), gv, xv, opt);
        EXPECT_EQ(0, std::memcmp(x.data(), y.data(), rows * width * SizeOf(t)))
            << target << " " << Name(t);
      }
    }
  });
}

// The output bits of a row do not depend on the SIMD target.
TEST(RmsNorm, SameBitsOnEveryTarget) {
  for (const Combo& c : AllCombos()) {
    for (int64_t width : {1, 17, 64, 100, 128, 4096, 5120, 5121}) {
      const int64_t rows = 3;
      Buffer x(c.x, rows * width), g(c.w, width);
      test::FillRandom(x);
      test::FillGamma(g);
      NormOptions opt;
      opt.rounding = c.rounding;
      test::ExpectSameBitsOnEveryTarget(Describe(c, width, ""), [&](const char*) {
        Buffer y(c.y, rows * width);
        RmsNorm(Contiguous<const void*>(x.data(), c.x, {rows, width}),
                Contiguous<const void*>(g.data(), c.w, {width}),
                Contiguous<void*>(y.data(), c.y, {rows, width}), opt);
        return test::BytesOf(y.data(), rows * width * SizeOf(c.y));
      });
    }
  }
}

// Narrow rows (widths of whole 64-lane chunks up to 512, GLM-4.5's heads of
// 128) in calls of 8 rows or more: the AVX3 target reduces 16 rows at once
// (simd/row_batch-inl.h), the others row by row. Same y and rstd bits on
// every target, with rows that leave the batch for the per-row rules (zero,
// NaN, inf, tiny and huge rows) at different places in a batch.
TEST(RmsNorm, NarrowRowsInBatchesSameBitsOnEveryTarget) {
  test::Seed();
  for (const Combo& c : AllCombos()) {
    for (int64_t width : {64, 128, 192, 512}) {
      const int64_t rows = 37;  // two batches of 16 and a short one
      Buffer x(c.x, rows * width), g(c.w, width);
      test::FillRandom(x);
      test::FillGamma(g);
      const auto row_set = [&](int64_t row, double v) {
        for (int64_t i = 0; i < width; ++i) x.Set(row * width + i, v * (1.0 + 0.01 * double(i)));
      };
      row_set(0, 0.0);
      x.Set(5 * width + 7, std::numeric_limits<double>::quiet_NaN());
      x.Set(15 * width + width - 1, std::numeric_limits<double>::infinity());
      row_set(16, 1e-30);  // squares underflow: the rescaling path
      row_set(21, 1e30);   // squares overflow (f16: inf)
      row_set(33, 1e-20);
      NormOptions opt;
      opt.rounding = c.rounding;
      test::ExpectSameBitsOnEveryTarget(Describe(c, width, "") + " y, rstd", [&](const char*) {
        Buffer y(c.y, rows * width);
        std::vector<float> rstd(rows, -1.0f);
        RmsNormWithRstd(Contiguous<const void*>(x.data(), c.x, {rows, width}),
                        Contiguous<const void*>(g.data(), c.w, {width}),
                        Contiguous<void*>(y.data(), c.y, {rows, width}),
                        Contiguous<void*>(rstd.data(), DType::kF32, {rows}), opt);
        std::vector<uint8_t> bits = test::BytesOf(y.data(), y.size * SizeOf(c.y));
        const std::vector<uint8_t> rb = test::BytesOf(rstd.data(), rows * sizeof(float));
        bits.insert(bits.end(), rb.begin(), rb.end());
        return bits;
      });
    }
  }
}

// Outputs of 4 MiB and more take the streaming stores (cpu_backend.h): same
// bits on every target (16-bit stores on SSE4 once faulted there: Highway
// 1.0.3 streams 8-byte vectors as 16 bytes).
TEST(RmsNorm, StreamedOutputsSameBitsOnEveryTarget) {
  for (DType t : {DType::kBF16, DType::kF16, DType::kF32}) {
    const int64_t rows = 420, width = 5121;  // > 4 MiB of 16-bit y; odd width
    Buffer x(t, rows * width, 1), g(t, width);
    test::FillRandom(x);
    test::FillGamma(g);
    const std::vector<uint8_t> first =
        test::ExpectSameBitsOnEveryTarget(std::string(Name(t)), [&](const char*) {
          Buffer y(t, rows * width, 3);  // misaligned: the head before the streamed body
          RmsNorm(Contiguous<const void*>(x.data(), t, {rows, width}),
                  Contiguous<const void*>(g.data(), t, {width}),
                  Contiguous<void*>(y.data(), t, {rows, width}));
          return test::BytesOf(y.data(), rows * width * SizeOf(t));
        });
    const test::OracleStats s = test::CompareWithOracle(
        Contiguous<const void*>(x.data(), t, {rows, width}),
        Contiguous<const void*>(g.data(), t, {width}),
        Contiguous<const void*>(first.data(), t, {rows, width}), {}, test::UlpLimit(t));
    EXPECT_EQ(s.over_limit, 0) << Name(t) << ": " << s.first_failure;
  }
}

// A row alone, and the same row at every 37th position of a batch of 1000
// computed with all threads, give identical bits.
TEST(RmsNorm, BatchInvariance) {
  for (DType t : {DType::kF32, DType::kBF16}) {
    const int64_t width = 5120, rows = 1000;
    Buffer batch(t, rows * width), g(t, width), y_batch(t, rows * width), one(t, width),
        y_one(t, width);
    test::FillRandom(batch);
    test::FillGamma(g);
    const auto gv = Contiguous<const void*>(g.data(), t, {width});
    RmsNorm(Contiguous<const void*>(batch.data(), t, {rows, width}), gv,
            Contiguous<void*>(y_batch.data(), t, {rows, width}));
    for (int64_t r = 0; r < rows; r += 37) {
      const size_t bytes = width * SizeOf(t);
      std::memcpy(one.data(), static_cast<const char*>(batch.data()) + r * bytes, bytes);
      RmsNorm(Contiguous<const void*>(one.data(), t, {1, width}), gv,
              Contiguous<void*>(y_one.data(), t, {1, width}));
      EXPECT_EQ(
          0, std::memcmp(y_one.data(), static_cast<const char*>(y_batch.data()) + r * bytes, bytes))
          << Name(t) << " row " << r;
    }
  }
}

TEST(RmsNorm, ThreadCountsGiveIdenticalBits) {
  const int64_t width = 4096, rows = 300;
  Buffer x(DType::kBF16, rows * width), g(DType::kBF16, width), ref(DType::kBF16, rows * width);
  test::FillRandom(x);
  test::FillGamma(g);
  const auto xv = Contiguous<const void*>(x.data(), DType::kBF16, {rows, width});
  const auto gv = Contiguous<const void*>(g.data(), DType::kBF16, {width});
  const Executor serial = SerialExecutor();
  Execution on_caller;
  on_caller.executor = &serial;
  RmsNorm(xv, gv, Contiguous<void*>(ref.data(), DType::kBF16, {rows, width}), {}, on_caller);
  const int before = NumThreads();
  for (int threads : {1, 2, 3, 8}) {
    SetNumThreads(threads);
    Buffer y(DType::kBF16, rows * width);
    RmsNorm(xv, gv, Contiguous<void*>(y.data(), DType::kBF16, {rows, width}));
    EXPECT_EQ(0, std::memcmp(y.data(), ref.data(), rows * width * 2)) << threads << " threads";
  }
  SetNumThreads(before);
}

// Zero rows, +-inf, NaN, subnormals, rows near float max and near float min.
TEST(RmsNorm, SpecialValues) {
  const float kMax = std::numeric_limits<float>::max();
  const float kDenorm = std::numeric_limits<float>::denorm_min();
  const float kInf = std::numeric_limits<float>::infinity();
  const float kNan = std::numeric_limits<float>::quiet_NaN();
  struct Row {
    const char* name;
    std::function<float(int64_t)> value;
    float eps;
  };
  const std::vector<Row> special_rows = {
      {"zeros", [](int64_t) { return 0.0f; }, 1e-5f},
      {"zeros eps=0", [](int64_t) { return 0.0f; }, 0.0f},
      {"one +inf", [&](int64_t i) { return i == 3 ? kInf : 1.0f; }, 1e-5f},
      {"one -inf", [&](int64_t i) { return i == 5 ? -kInf : 0.5f; }, 1e-5f},
      {"one NaN", [&](int64_t i) { return i == 2 ? kNan : 1.0f; }, 1e-5f},
      {"subnormals", [&](int64_t i) { return kDenorm * float(i + 1); }, 1e-5f},
      {"subnormals eps=0", [&](int64_t i) { return kDenorm * float(i % 7 + 1); }, 0.0f},
      {"near float max", [&](int64_t i) { return (i % 2 ? -0.9f : 0.7f) * kMax; }, 1e-5f},
      {"mixed huge", [&](int64_t i) { return i == 0 ? kMax : float(i); }, 1e-5f},
      {"near float min eps=0", [&](int64_t i) { return 1e-38f * float(i % 5 + 1); }, 0.0f},
      {"tiny eps=0", [&](int64_t i) { return 1e-30f * float(i % 3 - 1); }, 0.0f},
  };
  test::ForEachTarget([&](const char* target) {
    for (const Row& row : special_rows) {
      for (DType t : {DType::kF32, DType::kBF16}) {
        for (int64_t width : {9, 128, 200}) {
          Buffer x(t, width), g(t, width), y(t, width);
          for (int64_t i = 0; i < width; ++i) x.Set(i, row.value(i));
          test::FillGamma(g);
          NormOptions opt;
          opt.eps = row.eps;
          const auto xv = Contiguous<const void*>(x.data(), t, {1, width});
          const auto gv = Contiguous<const void*>(g.data(), t, {width});
          RmsNorm(xv, gv, Contiguous<void*>(y.data(), t, {1, width}), opt);
          const auto stats = test::CompareWithOracle(
              xv, gv, Contiguous<const void*>(y.data(), t, {1, width}), opt, test::UlpLimit(t));
          EXPECT_EQ(stats.over_limit, 0) << target << " " << row.name << " " << Name(t) << " width "
                                         << width << ": " << stats.first_failure;
        }
      }
    }
  });
}

// Wide rows of a job whose output streams (at least kStreamMinBytes) reduce
// the next row block by block between this row's spans (ForEachRowInSpans,
// row_batch-inl.h), smaller jobs row by row, heads several rows at once
// (InvRmsOfRows): special rows (NaN, inf, zeros, rows
// that need rescaling) in the middle and at both ends of a call take the
// same paths as a row alone, on every target, in place too.
TEST(RmsNorm, SpecialRowsAmongWideRows) {
  const float kMax = std::numeric_limits<float>::max();
  const float kInf = std::numeric_limits<float>::infinity();
  const float kNan = std::numeric_limits<float>::quiet_NaN();
  // Value i of a special row of `width` values.
  const std::vector<std::function<float(int64_t, int64_t)>> special = {
      [&](int64_t i, int64_t width) { return i == 700 % width ? kNan : 1.0f; },
      [&](int64_t i, int64_t width) { return i == 1030 % width ? -kInf : 0.5f; },
      [](int64_t, int64_t) { return 0.0f; },
      [&](int64_t i, int64_t) { return (i % 2 ? -0.9f : 0.7f) * kMax; },
      [](int64_t i, int64_t) { return 1e-30f * float(i % 3 - 1); },
  };
  test::ForEachTarget([&](const char* target) {
    for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
      // Heads of 128 and 512 too: 13 rows are a batch of 16 (RowBatches).
      // Wide rows also as many as make the output stream.
      for (auto [width, streamed] : {std::pair<int64_t, bool>{128, false}, {512, false},
                                     {1024, false}, {1100, false}, {5121, false}, {1100, true},
                                     {5121, true}}) {
        const int64_t row_bytes = width * static_cast<int64_t>(SizeOf(t));
        const int64_t rows = streamed ? cpu::kStreamMinBytes / row_bytes + 2
                                      : 2 * static_cast<int64_t>(special.size()) + 3;
        Buffer x(t, rows * width, 1), g(t, width), y(t, rows * width, 3), one(t, width),
            y_one(t, width);
        test::FillRandom(x);
        test::FillGamma(g);
        // Special rows first, in the middle (odd rows) and last.
        for (size_t k = 0; k < special.size(); ++k) {
          const int64_t r = k == 0 ? 0 : k + 1 == special.size() ? rows - 1 : 2 * k + 1;
          for (int64_t i = 0; i < width; ++i) x.Set(r * width + i, special[k](i, width));
        }
        NormOptions opt;
        opt.eps = 0.0f;  // the tiny row then needs the rescaling path
        const auto xv = Contiguous<const void*>(x.data(), t, {rows, width});
        const auto gv = Contiguous<const void*>(g.data(), t, {width});
        RmsNorm(xv, gv, Contiguous<void*>(y.data(), t, {rows, width}), opt);
        const std::string what = std::string(target) + " " + std::string(Name(t)) + " width " +
                                 std::to_string(width) + (streamed ? " streamed" : "");
        const auto stats = test::CompareWithOracle(
            xv, gv, Contiguous<const void*>(y.data(), t, {rows, width}), opt, test::UlpLimit(t));
        EXPECT_EQ(stats.over_limit, 0) << what << ": " << stats.first_failure;
        const size_t bytes = width * SizeOf(t);
        for (int64_t r = 0; r < rows; ++r) {
          std::memcpy(one.data(), static_cast<const char*>(x.data()) + r * bytes, bytes);
          RmsNorm(Contiguous<const void*>(one.data(), t, {1, width}), gv,
                  Contiguous<void*>(y_one.data(), t, {1, width}), opt);
          EXPECT_EQ(
              0, std::memcmp(y_one.data(), static_cast<const char*>(y.data()) + r * bytes, bytes))
              << what << " row " << r;
        }
        // In place: the same bits.
        RmsNorm(xv, gv, Contiguous<void*>(x.data(), t, {rows, width}), opt);
        EXPECT_EQ(0, std::memcmp(x.data(), y.data(), rows * bytes)) << what << " in place";
      }
    }
  });
}

// bf16 rows of 1024 values or more, and heads reduced in batches, take the
// AVX512-BF16 instructions for
// their squares, h and y where the row's smallest nonzero |x|, r and
// gamma's smallest nonzero magnitude prove that nothing they would flush is
// subnormal (NativeRowOk, norm_row-inl.h; FinishRowInvRms,
// reduction-inl.h). Rows on both sides of each bound (the tiny values in
// the row's last partial block too), gammas with tiny, subnormal, zero and
// non-finite entries, the Gemma offset, in place and streamed with a
// misaligned output: the same bits on every target ("AVX3+BF16" is the
// native one, SCALAR never is) and within the oracle's limit.
TEST(RmsNorm, NativeBf16RowsKeepTheBitsAtEveryBound) {
  const float kInf = std::numeric_limits<float>::infinity();
  const float kNan = std::numeric_limits<float>::quiet_NaN();
  const uint64_t seed = test::Seed();
  // Row k of a call: random values (or all `fill`), then `value` at three
  // places.
  struct RowKind {
    const char* name;
    float value;
    bool filled = false;
    float fill = 0.0f;
  };
  const RowKind kRows[] = {
      {"plain", 0.0f},
      {"one 2^-63 (smallest square that is normal)", 0x1p-63f},
      {"one 2^-64 (its square is subnormal)", 0x1p-64f},
      {"one subnormal", 0x1p-130f},
      {"one 2^-60", 0x1p-60f},
      {"one 2^63 (a sum near float max)", 0x1p63f},
      {"-2^-63 among zeros", -0x1p-63f, true, 0.0f},
      // The subnormal squares add up to more than half an ulp of the sum,
      // so a sum that flushed them would be another float (rstd shows it).
      {"2^-48 among 2^-64", 0x1p-48f, true, 0x1p-64f},
  };
  struct GammaKind {
    const char* name;
    float value;  // at three places; 0: none
    float offset;
  };
  const GammaKind kGammas[] = {
      {"random", 0.0f, 0.0f},
      {"one 2^-126", 0x1p-126f, 0.0f},
      {"one 2^-100", 0x1p-100f, 0.0f},
      {"one subnormal", 0x1p-130f, 0.0f},
      {"one -0", -0.0f, 0.0f},
      {"one inf", kInf, 0.0f},
      {"one NaN", kNan, 0.0f},
      {"offset 1, one -1", -1.0f, 1.0f},
      {"offset 1, one -1 + 2^-8", -1.0f + 0x1p-8f, 1.0f},
  };
  // Heads of 128 and 512: eight rows are reduced in one batch (RowBatches).
  for (int64_t width : {128, 512, 1024, 1100, 5120}) {
    const int64_t rows = static_cast<int64_t>(std::size(kRows));
    Buffer x(DType::kBF16, rows * width);
    test::FillRandom(x, 1.0);
    for (int64_t k = 0; k < rows; ++k) {
      const float v = kRows[k].value;
      if (v == 0.0f) continue;
      if (kRows[k].filled) {
        for (int64_t i = 0; i < width; ++i) x.Set(k * width + i, kRows[k].fill);
      }
      // A whole block, the last partial block (width 1100), the last value.
      for (int64_t i : {int64_t{5}, width - 40, width - 1}) x.Set(k * width + i, v);
    }
    for (const GammaKind& gk : kGammas) {
      Buffer g(DType::kBF16, width);
      test::FillGamma(g);
      if (gk.value != 0.0f || std::signbit(gk.value)) {
        for (int64_t i : {int64_t{1}, width / 2, width - 3}) g.Set(i, gk.value);
      }
      NormOptions opt;
      opt.weight_offset = gk.offset;
      const std::string what = "width " + std::to_string(width) + ", gamma " + gk.name + ", seed " +
                               std::to_string(seed);
      const auto xv = Contiguous<const void*>(x.data(), DType::kBF16, {rows, width});
      const auto gv = Contiguous<const void*>(g.data(), DType::kBF16, {width});
      test::ExpectSameBitsOnEveryTarget(what, [&](const char*) {
        Buffer y(DType::kBF16, rows * width);
        std::vector<float> rstd(rows);
        RmsNormWithRstd(xv, gv, Contiguous<void*>(y.data(), DType::kBF16, {rows, width}),
                        Contiguous<void*>(rstd.data(), DType::kF32, {rows}), opt);
        // Each row alone (the reduction of a first row is not interleaved).
        Buffer y_row(DType::kBF16, width);
        for (int64_t k = 0; k < rows; ++k) {
          RmsNorm(Contiguous<const void*>(static_cast<const uint16_t*>(x.data()) + k * width,
                                          DType::kBF16, {1, width}),
                  gv, Contiguous<void*>(y_row.data(), DType::kBF16, {1, width}), opt);
          EXPECT_EQ(0, std::memcmp(y_row.data(), static_cast<const uint16_t*>(y.data()) + k * width,
                                   width * 2))
              << what << ": row " << kRows[k].name << " alone";
        }
        if (std::isfinite(gk.value)) {
          const auto stats = test::CompareWithOracle(
              xv, gv, Contiguous<const void*>(y.data(), DType::kBF16, {rows, width}), opt,
              test::UlpLimit(DType::kBF16));
          EXPECT_EQ(stats.over_limit, 0) << what << ": " << stats.first_failure;
        }
        std::vector<uint8_t> bytes = test::BytesOf(y.data(), rows * width * 2);
        const std::vector<uint8_t> rstd_bytes = test::BytesOf(rstd.data(), rows * 4);
        bytes.insert(bytes.end(), rstd_bytes.begin(), rstd_bytes.end());
        return bytes;
      });
    }
  }
  // Streamed (an output of 4 MiB or more) to a misaligned y, in place too.
  const int64_t rows = 420, width = 5120;
  Buffer x(DType::kBF16, rows * width), g(DType::kBF16, width);
  test::FillRandom(x, 1.0);
  test::FillGamma(g);
  for (int64_t k = 0; k < rows; k += 7) x.Set(k * width + 3 + k, kRows[k % 6].value);
  const auto xv = Contiguous<const void*>(x.data(), DType::kBF16, {rows, width});
  const auto gv = Contiguous<const void*>(g.data(), DType::kBF16, {width});
  const auto streamed = test::ExpectSameBitsOnEveryTarget("streamed", [&](const char*) {
    Buffer y(DType::kBF16, rows * width, 5);
    RmsNorm(xv, gv, Contiguous<void*>(y.data(), DType::kBF16, {rows, width}));
    return test::BytesOf(y.data(), rows * width * 2);
  });
  Buffer in_place = x;
  RmsNorm(Contiguous<const void*>(in_place.data(), DType::kBF16, {rows, width}), gv,
          Contiguous<void*>(in_place.data(), DType::kBF16, {rows, width}));
  EXPECT_EQ(streamed, test::BytesOf(in_place.data(), rows * width * 2)) << "in place";
}

// Heads in 16-row batches that NativeRowOk admits as a whole are normalised
// in one loop, gamma split once per call (NormalizeNativeRows,
// norm_row-inl.h); a batch with a row past the bound goes row by row. Full
// and short batches, strided rows, the Gemma offset, rstd, in place, and
// streamed outputs (aligned: the loop's streaming stores; misaligned: row
// by row): the same bits on every target and within the oracle's limit.
TEST(RmsNorm, NativeBf16HeadBatchesKeepTheBits) {
  const uint64_t seed = test::Seed();
  const DType t = DType::kBF16;
  for (int64_t width : {128, 256, 512}) {
    for (float offset : {0.0f, 1.0f}) {
      const int64_t rows = 53, pitch = width + 32;  // batches of 16, 16, 16, 5
      Buffer x(t, rows * pitch), g(t, width);
      test::FillRandom(x, 1.0);
      test::FillGamma(g);
      x.Set(20 * pitch + 7, 0x1p-130);  // a subnormal: rows 16-31 go row by row
      x.Set(40 * pitch + 3, 0x1p-64);   // its square is re-summed exactly; native
      ConstTensorView xv = Contiguous<const void*>(x.data(), t, {rows, width});
      xv.stride[0] = pitch;
      const auto gv = Contiguous<const void*>(g.data(), t, {width});
      NormOptions opt;
      opt.weight_offset = offset;
      const std::string what = "width " + std::to_string(width) + ", offset " +
                               std::to_string(offset) + ", seed " + std::to_string(seed);
      const std::vector<uint8_t> first = test::ExpectSameBitsOnEveryTarget(what, [&](const char*) {
        Buffer y(t, rows * width);
        std::vector<float> rstd(rows);
        RmsNormWithRstd(xv, gv, Contiguous<void*>(y.data(), t, {rows, width}),
                        Contiguous<void*>(rstd.data(), DType::kF32, {rows}), opt);
        // In place, on a copy of the strided rows: the same bits.
        Buffer in_place = x;
        ConstTensorView iv = xv;
        iv.data = in_place.data();
        TensorView ov = Contiguous<void*>(in_place.data(), t, {rows, width});
        ov.stride[0] = pitch;
        RmsNorm(iv, gv, ov, opt);
        for (int64_t k = 0; k < rows; ++k) {
          EXPECT_EQ(0, std::memcmp(static_cast<const uint16_t*>(in_place.data()) + k * pitch,
                                   static_cast<const uint16_t*>(y.data()) + k * width, width * 2))
              << what << ": row " << k << " in place";
        }
        std::vector<uint8_t> bytes = test::BytesOf(y.data(), rows * width * 2);
        const std::vector<uint8_t> rstd_bytes = test::BytesOf(rstd.data(), rows * 4);
        bytes.insert(bytes.end(), rstd_bytes.begin(), rstd_bytes.end());
        return bytes;
      });
      const auto stats = test::CompareWithOracle(
          xv, gv, Contiguous<const void*>(first.data(), t, {rows, width}), opt, test::UlpLimit(t));
      EXPECT_EQ(stats.over_limit, 0) << what << ": " << stats.first_failure;
    }
  }
  // Streamed: 16400 heads of 128 are over 4 MiB of y.
  const int64_t rows = 16400, width = 128;
  Buffer x(t, rows * width), g(t, width);
  test::FillRandom(x, 1.0);
  test::FillGamma(g);
  x.Set(777 * width + 5, 0x1p-130);
  const auto xv = Contiguous<const void*>(x.data(), t, {rows, width});
  const auto gv = Contiguous<const void*>(g.data(), t, {width});
  std::vector<uint8_t> by_alignment[2];
  for (size_t misalign : {0, 1}) {
    by_alignment[misalign] = test::ExpectSameBitsOnEveryTarget(
        "streamed, misaligned by " + std::to_string(misalign), [&](const char*) {
          Buffer y(t, rows * width + 64);
          char* p = static_cast<char*>(y.data());
          p += (64 - reinterpret_cast<uintptr_t>(p) % 64) % 64 + 2 * misalign;
          RmsNorm(xv, gv, Contiguous<void*>(p, t, {rows, width}));
          return test::BytesOf(p, rows * width * 2);
        });
  }
  EXPECT_EQ(by_alignment[0], by_alignment[1]);
  const auto stats = test::CompareWithOracle(
      xv, gv, Contiguous<const void*>(by_alignment[0].data(), t, {rows, width}), {},
      test::UlpLimit(t));
  EXPECT_EQ(stats.over_limit, 0) << "streamed: " << stats.first_failure;
}

// The canonical order is at least as accurate as PyTorch's float32 sum: on a
// row of 5120 equal values PyTorch's output is ~4 ulp from exact.
TEST(RmsNorm, EqualValuesRowAccuracy) {
  const int64_t width = 5120;
  for (float c : {0.1f, 0.3f, 1.7f, 3.14159f}) {
    std::vector<float> x(width, c), g(width, 1.0f), y(width);
    NormOptions opt;
    RmsNorm(Contiguous<const void*>(x.data(), DType::kF32, {width}),
            Contiguous<const void*>(g.data(), DType::kF32, {width}),
            Contiguous<void*>(y.data(), DType::kF32, {width}), opt);
    const double exact = double(c) / std::sqrt(double(c) * double(c) + 1e-5);
    const float want = static_cast<float>(exact);
    uint32_t a = BitsOf(y[0]), b = BitsOf(want);
    const int64_t ulp = std::llabs(int64_t(a) - int64_t(b));
    std::printf("[glmnorm] equal-values row c=%g: %lld ulp from exact\n", c, (long long)ulp);
    EXPECT_LE(ulp, 3) << "c=" << c;
  }
}

}  // namespace
}  // namespace glmnorm

namespace glmnorm {
namespace {
// Lists the targets the other tests ran on; the portable fallbacks must be
// among them, not only this CPU's best.
TEST(Targets, CompiledTargetsAreAllTested) {
  std::vector<std::string> names;
  test::ForEachTarget([&](const char* name) { names.push_back(name); });
  std::string joined;
  for (const auto& n : names) joined += n + " ";
  std::printf("[glmnorm] SIMD targets tested: %s\n", joined.c_str());
  EXPECT_GE(names.size(), 2u);
  // The portable fallback is always compiled and tested.
  EXPECT_NE(std::find(names.begin(), names.end(), std::string("SCALAR")), names.end()) << joined;
}
}  // namespace
}  // namespace glmnorm
