// Every invalid call throws glmnorm::Error naming the argument and the
// expected value, and leaves y untouched.
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "glmnorm/glmnorm.h"
#include "glmnorm/quant.h"

namespace glmnorm {
namespace {

using ::testing::HasSubstr;

struct Args {
  std::vector<float> x = std::vector<float>(4 * 8, 1.0f);
  std::vector<float> g = std::vector<float>(8, 1.0f);
  std::vector<float> y = std::vector<float>(4 * 8, 42.0f);
  ConstTensorView xv = Contiguous<const void*>(x.data(), DType::kF32, {4, 8});
  ConstTensorView gv = Contiguous<const void*>(g.data(), DType::kF32, {8});
  TensorView yv = Contiguous<void*>(y.data(), DType::kF32, {4, 8});
  NormOptions opt;
};

void ExpectError(const std::function<void(Args&)>& mutate, const std::string& fragment) {
  Args a;
  mutate(a);
  const std::vector<float> y_before = a.y;
  try {
    RmsNorm(a.xv, a.gv, a.yv, a.opt);
    ADD_FAILURE() << "no error; expected one containing \"" << fragment << "\"";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("RmsNorm: "));
    EXPECT_THAT(e.what(), HasSubstr(fragment));
  }
  EXPECT_EQ(0, std::memcmp(y_before.data(), a.y.data(), a.y.size() * sizeof(float)))
      << "y was written by a failing call (" << fragment << ")";
}

TEST(Errors, GammaLengthDiffersFromWidth) {
  ExpectError([](Args& a) { a.gv.shape[0] = 7; },
              "gamma length must equal the width 8, got 7");
}
TEST(Errors, GammaNotOneD) {
  ExpectError([](Args& a) { a.gv = Contiguous<const void*>(a.g.data(), DType::kF32, {2, 4}); },
              "gamma must be 1-D, got rank 2");
}
TEST(Errors, NullDataWithElements) {
  ExpectError([](Args& a) { a.xv.data = nullptr; }, "x.data is null but x has shape [4, 8]");
  ExpectError([](Args& a) { a.yv.data = nullptr; }, "y.data is null");
  ExpectError([](Args& a) { a.gv.data = nullptr; }, "gamma.data is null");
}
TEST(Errors, EpsNegativeNanInf) {
  ExpectError([](Args& a) { a.opt.eps = -1e-5f; }, "eps must be finite and >= 0");
  ExpectError([](Args& a) { a.opt.eps = std::nanf(""); }, "eps must be finite and >= 0");
  ExpectError([](Args& a) { a.opt.eps = std::numeric_limits<float>::infinity(); },
              "eps must be finite and >= 0");
}
// Numbers in messages read back as the value passed (std::to_string printed
// -1e-9 as "-0.000000").
TEST(Errors, NumbersInMessagesRoundTrip) {
  ExpectError([](Args& a) { a.opt.eps = -1e-9f; }, "got -1e-09");
  ExpectError([](Args& a) { a.opt.eps = -0x1p-149f; }, "got -1e-45");
}
TEST(Errors, ShapeWhoseElementCountOverflows) {
  // 2^62 * 2^62 rows: the product would overflow int64 (UB before the check).
  ExpectError([](Args& a) {
    a.xv.rank = a.yv.rank = 3;
    for (auto* v : {&a.xv.shape, &a.yv.shape}) (*v)[0] = (*v)[1] = int64_t{1} << 62, (*v)[2] = 8;
    a.xv.stride[2] = a.yv.stride[2] = 1;
  }, "x shape [4611686018427387904, 4611686018427387904, 8] with strides");
}
TEST(Errors, WeightOffsetNotFinite) {
  ExpectError([](Args& a) { a.opt.weight_offset = std::nanf(""); },
              "weight_offset must be finite");
}
TEST(Errors, LastDimNotContiguous) {
  ExpectError([](Args& a) { a.xv.stride[1] = 2; a.xv.shape[1] = 4; a.gv.shape[0] = 4; a.yv.shape[1] = 4; },
              "x.stride[1] (last dim) must be 1 (contiguous), got 2");
  ExpectError([](Args& a) { a.yv.stride[1] = 2; a.yv.shape[1] = 4; a.xv.shape[1] = 4; a.gv.shape[0] = 4; },
              "y.stride[1] (last dim) must be 1 (contiguous), got 2");
}
TEST(Errors, GammaNotContiguous) {
  ExpectError([](Args& a) { a.gv.stride[0] = 2; a.gv.shape[0] = 8; },
              "gamma.stride[0] must be 1 (contiguous), got 2");
}
TEST(Errors, YOverlapsXWithoutBeingX) {
  ExpectError(
      [](Args& a) {
        // y starts one row into x: partial overlap.
        a.yv = Contiguous<void*>(a.x.data() + 8, DType::kF32, {3, 8});
        a.xv = Contiguous<const void*>(a.x.data(), DType::kF32, {3, 8});
      },
      "y overlaps x without being the same view");
  ExpectError(
      [](Args& a) {
        // Same start, different row stride.
        a.yv = Rows<void*>(a.x.data(), DType::kF32, 2, 8, 16);
        a.xv = Rows<const void*>(a.x.data(), DType::kF32, 2, 8, 8);
      },
      "y overlaps x");
}
TEST(Errors, DisjointColumnSlicesOfOneBufferAreFine) {
  // x = columns 0..7, y = columns 8..15 of the same [4, 16] buffer.
  std::vector<float> buf(4 * 16, 1.0f), g(8, 1.0f);
  RmsNorm(Rows<const void*>(buf.data(), DType::kF32, 4, 8, 16),
          Contiguous<const void*>(g.data(), DType::kF32, {8}),
          Rows<void*>(buf.data() + 8, DType::kF32, 4, 8, 16));
  EXPECT_FLOAT_EQ(buf[0], 1.0f);  // x untouched
  EXPECT_NEAR(buf[8], 1.0f, 1e-5);
}
TEST(Errors, ShapesDiffer) {
  ExpectError([](Args& a) { a.yv.shape[0] = 3; }, "y shape must equal x shape [4, 8], got [3, 8]");
  ExpectError([](Args& a) { a.yv = Contiguous<void*>(a.y.data(), DType::kF32, {32}); a.gv.shape[0] = 8; },
              "y shape must equal x shape");
}
TEST(Errors, DtypeCombinationNotDefinedByMode) {
  // bf16 x with bf16 gamma promotes to bf16: an f32 y is not the reference.
  ExpectError(
      [](Args& a) {
        a.xv.dtype = DType::kBF16;
        a.gv.dtype = DType::kBF16;
      },
      "y.dtype must be bf16 in cast-then-scale mode (PyTorch's promotion of gamma bf16 with "
      "input bf16), got f32");
  ExpectError(
      [](Args& a) {
        a.xv.dtype = DType::kBF16;
        a.gv.dtype = DType::kF16;
        a.yv.dtype = DType::kBF16;
      },
      "y.dtype must be f32 in cast-then-scale mode");
  ExpectError(
      [](Args& a) {
        a.opt.rounding = Rounding::kSingle;
        a.xv.dtype = DType::kBF16;
        a.yv.dtype = DType::kF16;
      },
      "y.dtype must be the input dtype bf16 or f32 in single-rounding mode, got f16");
  ExpectError([](Args& a) { a.xv.dtype = DType::kI8; }, "x.dtype must be f32, bf16 or f16, got i8");
  ExpectError([](Args& a) { a.gv.dtype = DType::kF8E4M3; },
              "gamma.dtype must be f32, bf16 or f16, got f8e4m3");
}
TEST(Errors, RankOutOfRange) {
  ExpectError([](Args& a) { a.xv.rank = 5; }, "x.rank must be 1..4, got 5");
  ExpectError([](Args& a) { a.xv.rank = 0; }, "x.rank must be 1..4, got 0");
}
TEST(Errors, NegativeShape) {
  ExpectError([](Args& a) { a.xv.shape[0] = -1; }, "x.shape[0] must be >= 0, got -1");
}
TEST(Errors, MisalignedElementPointer) {
  ExpectError([](Args& a) { a.xv.data = reinterpret_cast<const char*>(a.x.data()) + 1; },
              "x.data must be aligned to 4 bytes for f32");
}
TEST(Errors, SetNumThreadsBelowOne) {
  try {
    SetNumThreads(0);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("SetNumThreads: n must be >= 1, got 0"));
  }
}
// A binding's scalars: refused by their own value, never narrowed (a
// narrowed 2**32 + 2 heads would be 2 heads; 1e300 eps would become inf).
TEST(Errors, BindingScalarsOutOfRangeAreRefusedNotNarrowed) {
  EXPECT_EQ(Int32Argument("head_dim", 128), 128);
  EXPECT_EQ(Int32Argument("n", INT32_MIN), INT32_MIN);
  EXPECT_EQ(Float32Argument("eps", 1e-5), 1e-5f);
  EXPECT_TRUE(std::isinf(Float32Argument("eps", HUGE_VAL)));  // the op judges inf and NaN
  EXPECT_TRUE(std::isnan(Float32Argument("eps", NAN)));
  try {
    Int32Argument("num_q_heads", (int64_t{1} << 32) + 2);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "num_q_heads must fit in 32 bits, got 4294967298");
  }
  EXPECT_EQ(Float32Argument("eps", 1e-40), static_cast<float>(1e-40));  // subnormal: kept
  try {
    Float32Argument("eps", 1e-46);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "eps must fit in float32 (it would round to 0), got 1e-46");
  }
  try {
    Float32Argument("eps", -1e300);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "eps must fit in float32, got -1e+300");
  }
  // The bindings' options and heads go through the same rules, by name.
  const NormOptions o = NormOptionsFrom(1e-6, "single", 1.0);
  EXPECT_EQ(o.eps, 1e-6f);
  EXPECT_EQ(o.rounding, Rounding::kSingle);
  EXPECT_EQ(o.weight_offset, 1.0f);
  const QkHeads h = QkHeadsFrom(96, 8, 8, 128);
  EXPECT_EQ(h.num_q_heads + h.num_k_heads + h.num_v_heads + h.head_dim, 96 + 8 + 8 + 128);
  for (const auto& [call, message] :
       std::vector<std::pair<std::function<void()>, std::string>>{
           {[] { NormOptionsFrom(1e300, "single", 0.0); }, "eps must fit in float32, got 1e+300"},
           {[] { NormOptionsFrom(1e-5, "double", 0.0); },
            "rounding must be 'cast-then-scale' or 'single', got 'double'"},
           {[] { NormOptionsFrom(1e-5, "single", -1e39); },
            "weight_offset must fit in float32, got -1e+39"},
           {[] { QkHeadsFrom(96, 8, int64_t{1} << 31, 128); },
            "num_v_heads must fit in 32 bits, got 2147483648"},
           {[] { QkHeadsFrom(96, 8, 8, -(int64_t{1} << 40)); },
            "head_dim must fit in 32 bits, got -1099511627776"}}) {
    try {
      call();
      ADD_FAILURE() << "no error, expected " << message;
    } catch (const Error& e) {
      EXPECT_EQ(e.what(), message);
    }
  }
}

TEST(Errors, EmptyBatchIsNotAnError) {
  std::vector<float> g(8, 1.0f);
  RmsNorm(Contiguous<const void*>(nullptr, DType::kF32, {0, 8}),
          Contiguous<const void*>(g.data(), DType::kF32, {8}),
          Contiguous<void*>(nullptr, DType::kF32, {0, 8}));
}

}  // namespace
}  // namespace glmnorm

namespace glmnorm {
namespace {

// Views that would make the result depend on the order of the writes (and so
// on the thread split), or read what the call has just written: errors.
TEST(Errors, OverlappingOutputsAndInputs) {
  std::vector<float> buf(64, 1.0f);
  const auto expect = [](const std::function<void()>& call, const std::string& fragment) {
    try {
      call();
      ADD_FAILURE() << "no error; expected \"" << fragment << "\"";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(fragment));
    }
  };
  const auto x = Contiguous<const void*>(buf.data() + 32, DType::kF32, {3, 4});
  // gamma inside y: rows after the first would read a gamma already written.
  expect([&] {
    RmsNorm(x, Contiguous<const void*>(buf.data(), DType::kF32, {4}),
            Contiguous<void*>(buf.data(), DType::kF32, {3, 4}));
  }, "RmsNorm: y overlaps gamma");
  // Rows of y on top of each other.
  TensorView y = Contiguous<void*>(buf.data(), DType::kF32, {3, 4});
  y.stride[0] = 0;
  expect([&] { RmsNorm(x, Contiguous<const void*>(buf.data() + 48, DType::kF32, {4}), y); },
         "RmsNorm: y.stride[0] must be >= 4 so that the rows written do not overlap, got 0");
  // Negative strides are refused (the overlap checks assume them away).
  ConstTensorView xn = Contiguous<const void*>(buf.data() + 40, DType::kF32, {3, 4});
  xn.stride[0] = -4;
  expect([&] {
    RmsNorm(xn, Contiguous<const void*>(buf.data() + 48, DType::kF32, {4}),
            Contiguous<void*>(buf.data(), DType::kF32, {3, 4}));
  }, "RmsNorm: x.stride[0] must be >= 0, got -4");
  // Dynamic scales inside x.
  std::vector<uint8_t> q(12);
  QuantOptions qo;
  qo.scales = Contiguous<void*>(buf.data() + 36, DType::kF32, {3});
  expect([&] {
    RmsNormQuant(x, Contiguous<const void*>(buf.data() + 48, DType::kF32, {4}),
                 Contiguous<void*>(q.data(), DType::kI8, {3, 4}), qo);
  }, "RmsNormQuant: scales overlaps x");
}

}  // namespace
}  // namespace glmnorm
