// RmsNormQuant / AddRmsNormQuant bit-exact against the scalar reference
// quantiser applied to the y that RmsNorm / AddRmsNorm store (the chosen
// semantic, quant.h), on every SIMD target; scales; errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "glmnorm/glmnorm.h"
#include "glmnorm/quant.h"
#include "ops/quant/quant_cases.h"
#include "reference/reference.h"
#include "support/test_support.h"

namespace glmnorm {
namespace {

using test::Buffer;
using ::testing::HasSubstr;

TEST(ReferenceQuantizer, KnownValues) {
  EXPECT_EQ(reference::QuantizeE4M3(448.0f, 1.0f), 0x7E);
  EXPECT_EQ(reference::QuantizeE4M3(464.0f, 1.0f), 0x7E);  // saturates, not NaN
  EXPECT_EQ(reference::QuantizeE4M3(1e30f, 1.0f), 0x7E);
  EXPECT_EQ(reference::QuantizeE4M3(-std::numeric_limits<float>::infinity(), 1.0f), 0xFE);
  EXPECT_EQ(reference::QuantizeE4M3(1.0f, 1.0f), 0x38);
  EXPECT_EQ(reference::QuantizeE4M3(1.0625f, 1.0f), 0x38);  // tie -> even mantissa
  EXPECT_EQ(reference::QuantizeE4M3(1.1875f, 1.0f), 0x3A);  // tie -> even mantissa
  EXPECT_EQ(reference::QuantizeE4M3(0x1p-9f, 1.0f), 0x01);  // smallest subnormal
  EXPECT_EQ(reference::QuantizeE4M3(0x1p-10f, 1.0f), 0x00);  // tie -> 0
  EXPECT_EQ(reference::QuantizeE4M3(3 * 0x1p-10f, 1.0f), 0x02);
  EXPECT_EQ(reference::QuantizeE4M3(-0.0f, 1.0f), 0x80);
  EXPECT_EQ(reference::QuantizeE4M3(std::nanf(""), 1.0f), 0x7F);
  EXPECT_EQ(reference::QuantizeI8(2.5f, 1.0f), 2);
  EXPECT_EQ(reference::QuantizeI8(-3.5f, 1.0f), -4);
  EXPECT_EQ(reference::QuantizeI8(1000.0f, 1.0f), 127);
  EXPECT_EQ(reference::QuantizeI8(-1000.0f, 1.0f), -128);
  EXPECT_EQ(reference::QuantizeI8(std::nanf(""), 1.0f), 0);
  for (int b = 0; b < 256; ++b) {
    const float v = reference::F32FromE4M3(static_cast<uint8_t>(b));
    if (std::isnan(v)) continue;
    EXPECT_EQ(reference::QuantizeE4M3(v, 1.0f), b) << b;  // every code round-trips
  }
}

// The case table (quant_cases.h).
using QCase = cases::QuantCase;

std::string Describe(const QCase& c, int64_t width, const char* target) {
  return std::string(target) + " x=" + std::string(Name(c.t)) + " w=" + std::string(Name(c.w)) +
         (c.rounding == Rounding::kCastThenScale ? " cast-then-scale" : " single") +
         " q=" + std::string(Name(c.q)) +
         (c.dynamic ? " dynamic" : " static scale=" + std::to_string(c.scale)) +
         " width=" + std::to_string(width);
}

std::vector<QCase> Cases() { return cases::QuantCases(); }

// The value dtype quantised: what RmsNorm stores (quant.h).
DType ValueType(const QCase& c) { return cases::QuantValueType(c.t, c.w, c.rounding); }

// The case's scaling, dynamic scales written to *s (one per row).
QuantOptions Options(const QCase& c, std::vector<float>* s) {
  QuantOptions qo;
  qo.scaling = c.dynamic ? QuantScaling::kDynamicPerToken : QuantScaling::kStatic;
  qo.scale = c.scale;
  qo.scales = Contiguous<void*>(s->data(), DType::kF32, {static_cast<int64_t>(s->size())});
  return qo;
}

// Expected q bytes and scales from y values (already as stored).
void ExpectedQuant(const QCase& c, const Buffer& y, int64_t rows, int64_t width,
                   std::vector<uint8_t>* q, std::vector<float>* scales) {
  q->resize(rows * width);
  scales->resize(rows);
  std::vector<float> v(width);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < width; ++i) v[i] = static_cast<float>(y.Get(r * width + i));
    const float s = c.dynamic ? reference::DynamicScale(v.data(), width, c.q) : c.scale;
    (*scales)[r] = s;
    for (int64_t i = 0; i < width; ++i) {
      (*q)[r * width + i] = c.q == DType::kI8
                                ? static_cast<uint8_t>(reference::QuantizeI8(v[i], s))
                                : reference::QuantizeE4M3(v[i], s);
    }
  }
}

void CheckQuant(const std::string& what, const QCase& c, const std::vector<uint8_t>& want_q,
                const std::vector<float>& want_s, const std::vector<uint8_t>& q,
                const std::vector<float>& s) {
  int64_t diffs = 0, first = -1;
  for (size_t i = 0; i < q.size(); ++i) {
    if (q[i] != want_q[i]) {
      if (first < 0) first = int64_t(i);
      ++diffs;
    }
  }
  EXPECT_EQ(diffs, 0) << what << ": first at " << first << " got 0x" << std::hex
                      << (first >= 0 ? int(q[first]) : 0) << " want 0x"
                      << (first >= 0 ? int(want_q[first]) : 0);
  if (c.dynamic) {
    for (size_t r = 0; r < s.size(); ++r) {
      EXPECT_EQ(BitsOf(s[r]), BitsOf(want_s[r])) << what << " scale of row " << r;
    }
  }
}

const auto& kWidths = cases::kQuantTestWidths;

TEST(RmsNormQuant, BitExactAgainstReferenceQuantizerEveryTarget) {
  test::Seed();
  test::ForEachTarget([](const char* target) {
    for (const QCase& c : Cases()) {
      for (int64_t width : kWidths) {
        const int64_t rows = width > 5120 ? 1 : 3;  // the reference quantiser is slow
        Buffer x(c.t, rows * width), g(c.w, width), y(ValueType(c), rows * width);
        test::FillRandom(x);
        test::FillGamma(g);
        if (width > 5) x.Set(width + 2, 0.0), x.Set(2, 300.0);  // an outlier
        NormOptions opt;
        opt.rounding = c.rounding;
        const auto xv = Contiguous<const void*>(x.data(), c.t, {rows, width});
        const auto gv = Contiguous<const void*>(g.data(), c.w, {width});
        RmsNorm(xv, gv, Contiguous<void*>(y.data(), ValueType(c), {rows, width}), opt);
        std::vector<uint8_t> want_q, q(rows * width, 0xAA);
        std::vector<float> want_s, s(rows, -1.0f);
        ExpectedQuant(c, y, rows, width, &want_q, &want_s);
        const QuantOptions qo = Options(c, &s);
        RmsNormQuant(xv, gv, Contiguous<void*>(q.data(), c.q, {rows, width}), qo, opt);
        CheckQuant(Describe(c, width, target), c, want_q, want_s, q, s);
      }
    }
  });
}

TEST(AddRmsNormQuant, BitExactAgainstReferenceQuantizerEveryTarget) {
  test::ForEachTarget([](const char* target) {
    for (const QCase& c : Cases()) {
      for (bool rounded_sum : {true, false}) {
        for (int64_t width : {3, 128, 5120, 8193}) {
          const int64_t rows = width > 5120 ? 1 : 3;  // the reference quantiser is slow
          Buffer res(c.t, rows * width), delta(c.t, rows * width), g(c.w, width),
              y(ValueType(c), rows * width);
          test::FillRandom(res);
          test::FillRandom(delta);
          test::FillGamma(g);
          AddNormOptions opt;
          opt.rounding = c.rounding;
          opt.normalize_rounded_sum = rounded_sum;
          Buffer res2 = res;
          const auto dv = Contiguous<const void*>(delta.data(), c.t, {rows, width});
          const auto gv = Contiguous<const void*>(g.data(), c.w, {width});
          AddRmsNorm(Contiguous<void*>(res2.data(), c.t, {rows, width}), dv, gv,
                     Contiguous<void*>(y.data(), ValueType(c), {rows, width}), opt);
          std::vector<uint8_t> want_q, q(rows * width, 0xAA);
          std::vector<float> want_s, s(rows, -1.0f);
          ExpectedQuant(c, y, rows, width, &want_q, &want_s);
          const QuantOptions qo = Options(c, &s);
          AddRmsNormQuant(Contiguous<void*>(res.data(), c.t, {rows, width}), dv, gv,
                          Contiguous<void*>(q.data(), c.q, {rows, width}), qo, opt);
          const std::string what =
              Describe(c, width, target) + (rounded_sum ? " rounded-sum" : " f32-sum");
          CheckQuant(what, c, want_q, want_s, q, s);
          EXPECT_EQ(0, std::memcmp(res.data(), res2.data(), rows * width * SizeOf(c.t))) << what;
        }
      }
    }
  });
}

// The two semantics differ: quantising the bf16 y of the reference is not
// quantising the float32 y (and each mode is what it says, tested above).
TEST(RmsNormQuant, CastThenScaleQuantisesTheBf16Y) {
  const int64_t rows = 16, width = 5120;
  Buffer x(DType::kBF16, rows * width), g(DType::kBF16, width);
  test::FillRandom(x, 1.0);
  test::FillGamma(g);
  const auto xv = Contiguous<const void*>(x.data(), DType::kBF16, {rows, width});
  const auto gv = Contiguous<const void*>(g.data(), DType::kBF16, {width});
  std::vector<float> s(rows);
  QuantOptions qo;
  qo.scales = Contiguous<void*>(s.data(), DType::kF32, {rows});
  std::vector<uint8_t> q_cast(rows * width), q_single(rows * width);
  RmsNormQuant(xv, gv, Contiguous<void*>(q_cast.data(), DType::kF8E4M3, {rows, width}), qo);
  NormOptions single;
  single.rounding = Rounding::kSingle;
  RmsNormQuant(xv, gv, Contiguous<void*>(q_single.data(), DType::kF8E4M3, {rows, width}), qo,
               single);
  EXPECT_NE(q_cast, q_single);
}

TEST(RmsNormQuant, ZeroRowGetsScaleOne) {
  std::vector<float> x(2 * 8, 0.0f), g(8, 1.0f), s(2);
  for (int i = 8; i < 16; ++i) x[i] = float(i);
  std::vector<int8_t> q(16, 5);
  QuantOptions qo;
  qo.scales = Contiguous<void*>(s.data(), DType::kF32, {2});
  RmsNormQuant(Contiguous<const void*>(x.data(), DType::kF32, {2, 8}),
               Contiguous<const void*>(g.data(), DType::kF32, {8}),
               Contiguous<void*>(q.data(), DType::kI8, {2, 8}), qo);
  EXPECT_EQ(s[0], 1.0f);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(q[i], 0);
  EXPECT_EQ(q[15], 127);  // the row max maps to qmax
}

// ---------------------------------------------------------------- errors

struct QArgs {
  std::vector<uint16_t> x = std::vector<uint16_t>(4 * 8, BF16FromF32(1.0f));
  std::vector<uint16_t> g = std::vector<uint16_t>(8, BF16FromF32(1.0f));
  std::vector<uint8_t> q = std::vector<uint8_t>(4 * 8, 0x11);
  std::vector<float> s = std::vector<float>(4, -7.0f);
  ConstTensorView xv = Contiguous<const void*>(x.data(), DType::kBF16, {4, 8});
  ConstTensorView gv = Contiguous<const void*>(g.data(), DType::kBF16, {8});
  TensorView qv = Contiguous<void*>(q.data(), DType::kF8E4M3, {4, 8});
  QuantOptions qo;
  NormOptions opt;
  QArgs() {
    qo.scales = Contiguous<void*>(s.data(), DType::kF32, {4});
  }
};

void ExpectQuantError(const std::function<void(QArgs&)>& mutate, const std::string& fragment) {
  QArgs a;
  mutate(a);
  const auto q_before = a.q;
  const auto s_before = a.s;
  try {
    RmsNormQuant(a.xv, a.gv, a.qv, a.qo, a.opt);
    ADD_FAILURE() << "no error; expected one containing \"" << fragment << "\"";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("RmsNormQuant: "));
    EXPECT_THAT(e.what(), HasSubstr(fragment));
  }
  EXPECT_EQ(q_before, a.q);
  EXPECT_EQ(s_before, a.s);
}

TEST(RmsNormQuant, Errors) {
  const auto static_scale = [](float s) {
    return [s](QArgs& a) {
      a.qo.scaling = QuantScaling::kStatic;
      a.qo.scale = s;
    };
  };
  ExpectQuantError(static_scale(0.0f), "scale must be finite and > 0 for a static scale, got 0");
  ExpectQuantError(static_scale(-1.0f), "scale must be finite and > 0");
  ExpectQuantError(static_scale(std::nanf("")), "scale must be finite and > 0");
  ExpectQuantError(static_scale(std::numeric_limits<float>::infinity()),
                   "scale must be finite and > 0");
  ExpectQuantError([](QArgs& a) { a.qo.scales.data = nullptr; },
                   "scales must not be null for a dynamic per-token scale");
  ExpectQuantError([](QArgs& a) { a.qo.scales.shape[0] = 3; },
                   "scales must be [rows] or [rows, 1] with rows = 4, got [3]");
  ExpectQuantError([](QArgs& a) { a.qo.scales.dtype = DType::kBF16; },
                   "scales.dtype must be f32, got bf16");
  ExpectQuantError([](QArgs& a) { a.qv.dtype = DType::kBF16; },
                   "q.dtype must be i8 or f8e4m3, got bf16");
  ExpectQuantError([](QArgs& a) { a.qv.shape[1] = 7; }, "q shape must equal x shape");
  ExpectQuantError([](QArgs& a) { a.gv.dtype = DType::kF16; },
                   "gamma.dtype must be f32 or x's dtype bf16 for a quantised output, got f16");
}

TEST(AddRmsNormQuant, Errors) {
  std::vector<uint16_t> r(16, BF16FromF32(1.0f)), d(16, BF16FromF32(1.0f)),
      g(8, BF16FromF32(1.0f));
  std::vector<uint8_t> q(16);
  QuantOptions qo;
  qo.scaling = QuantScaling::kStatic;
  qo.scale = std::nanf("");
  try {
    AddRmsNormQuant(Contiguous<void*>(r.data(), DType::kBF16, {2, 8}),
                    Contiguous<const void*>(d.data(), DType::kBF16, {2, 8}),
                    Contiguous<const void*>(g.data(), DType::kBF16, {8}),
                    Contiguous<void*>(q.data(), DType::kI8, {2, 8}), qo);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("AddRmsNormQuant: scale must be finite and > 0"));
  }
  EXPECT_EQ(r[0], BF16FromF32(1.0f)) << "residual written on failure";
}

}  // namespace
}  // namespace glmnorm

namespace glmnorm {
namespace {

// Dynamic per-token scales at the edges of float32 (quant.h): every scale is
// a normal float32, every code decodes (q * scale) to a finite value, the
// largest finite |v| maps to qmax where its scale is not clamped, and
// kernels equal the reference on every target.
TEST(RmsNormQuant, DynamicScaleUsableForEveryFiniteRow) {
  const float kMax = std::numeric_limits<float>::max();
  // y = gamma * x * r; x = [1, 0.5, -0.25, 0] gives x * r within [-0.44, 1.75].
  const float gammas[] = {0.0f,          0x1p-149f, 1e-44f,       1e-41f,  0x1p-126f,
                          3e-36f,        1.0f,      1e30f,        kMax / 2, kMax / 1.75f,
                          kMax};  // the last overflows y to inf: only finite values count
  for (DType qt : {DType::kI8, DType::kF8E4M3}) {
    const float qmax = qt == DType::kI8 ? 127.0f : 448.0f;
    test::ForEachTarget([&](const char* target) {
      for (float gv : gammas) {
        const std::vector<float> x = {1.0f, 0.5f, -0.25f, 0.0f};
        const std::vector<float> g(4, gv);
        std::vector<float> y(4);
        NormOptions opt;
        opt.rounding = Rounding::kSingle;
        const auto xv = Contiguous<const void*>(x.data(), DType::kF32, {1, 4});
        const auto gvw = Contiguous<const void*>(g.data(), DType::kF32, {4});
        RmsNorm(xv, gvw, Contiguous<void*>(y.data(), DType::kF32, {1, 4}), opt);
        std::vector<uint8_t> q(4, 0xAA);
        float scale = -1.0f;
        QuantOptions qo;
        qo.scales = Contiguous<void*>(&scale, DType::kF32, {1});
        RmsNormQuant(xv, gvw, Contiguous<void*>(q.data(), qt, {1, 4}), qo, opt);
        const std::string what = std::string(target) + " " + std::string(Name(qt)) +
                                 " gamma=" + std::to_string(gv);
        EXPECT_EQ(scale, reference::DynamicScale(y.data(), 4, qt)) << what;
        EXPECT_TRUE(std::isnormal(scale) && scale > 0.0f) << what << " scale " << scale;
        float max_finite = 0.0f;
        for (float v : y) {
          if (std::isfinite(v)) max_finite = std::max(max_finite, std::fabs(v));
        }
        for (int i = 0; i < 4; ++i) {
          const float code = qt == DType::kI8 ? static_cast<float>(static_cast<int8_t>(q[i]))
                                              : reference::F32FromE4M3(q[i]);
          EXPECT_TRUE(std::isfinite(code)) << what << " lane " << i;
          EXPECT_LE(std::fabs(code), qmax) << what;
          EXPECT_TRUE(std::isfinite(code * scale)) << what << " lane " << i << " decodes to inf";
          const uint8_t want = qt == DType::kI8
                                   ? static_cast<uint8_t>(reference::QuantizeI8(y[i], scale))
                                   : reference::QuantizeE4M3(y[i], scale);
          EXPECT_EQ(q[i], want) << what << " lane " << i;
        }
        if (max_finite / qmax >= 0x1p-126f) {
          // The largest finite value is coded as +-qmax (an inf y saturates to it too).
          EXPECT_EQ(std::fabs(qt == DType::kI8 ? static_cast<float>(static_cast<int8_t>(q[0]))
                                               : reference::F32FromE4M3(q[0])),
                    qmax)
              << what;
        }
        if (max_finite == 0.0f) {
          EXPECT_EQ(scale, 1.0f) << what;
        }
      }
    });
  }
}

TEST(ReferenceQuantizer, DynamicScaleRule) {
  const float kMax = std::numeric_limits<float>::max();
  const float zeros[] = {0.0f, -0.0f};
  EXPECT_EQ(reference::DynamicScale(zeros, 2, DType::kI8), 1.0f);
  const float specials[] = {std::numeric_limits<float>::infinity(), std::nanf(""), 0.0f};
  EXPECT_EQ(reference::DynamicScale(specials, 3, DType::kF8E4M3), 1.0f);
  const float tiny[] = {0x1p-149f};
  EXPECT_EQ(reference::DynamicScale(tiny, 1, DType::kF8E4M3), 0x1p-126f);  // clamped normal
  const float ordinary[] = {-2.0f, 448.0f};
  EXPECT_EQ(reference::DynamicScale(ordinary, 2, DType::kF8E4M3), 1.0f);
  const float huge[] = {kMax};
  const float s = reference::DynamicScale(huge, 1, DType::kF8E4M3);
  EXPECT_TRUE(std::isfinite(448.0f * s));
  EXPECT_TRUE(std::isinf(448.0f * std::nextafter(s, kMax)));  // the largest such scale
}

}  // namespace
}  // namespace glmnorm
