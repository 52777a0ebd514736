// glmnorm::RmsNorm against Transformers' Glm4MoeRMSNorm (golden data made by
// scripts/make_golden.py), in the default cast-then-scale mode.
//
// Bars:
//   bf16 output: >= 99.99% of elements bit-identical to Transformers, none
//     more than 1 ulp away (the only expected differences come from the
//     float32 sum of squares being added in another order).
//   f32 output of f32 input: within 4 ulp of Transformers, and no further from
//     a float64 reference (computed here, independently of the library) than
//     Transformers is. The latter is checked on the worst element of each case
//     (in ulps of the reference): two float32 computations that round in
//     different places each win on about half the elements, so per-element
//     domination does not hold even for an implementation as accurate as
//     PyTorch's; the per-element figure is printed, not asserted.
//   f32 output of bf16 input with f32 gamma (PyTorch promotes): y =
//     gamma * bf16(x * r) rounded once to f32, so the only freedom is the bf16
//     rounding of x * r: >= 99.99% bit-identical, and every other element
//     equals gamma times a bf16 neighbour of Transformers' bf16(x * r).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <iterator>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "glmnorm/rms_norm.h"
#include "support/golden_data.h"
#include "support/test_support.h"

namespace glmnorm::golden {
namespace {

// The library's promise for f32 outputs.
constexpr int64_t kMaxF32UlpsFromTorch = test::UlpLimit(DType::kF32);

const char* const kRmsNormCases[] = {
    "rms_norm_bf16_w128",
    "rms_norm_bf16_w4096",
    "rms_norm_bf16_w5120",
    "rms_norm_f32_w128",
    "rms_norm_f32_w4096",
    "rms_norm_f32_w5120",
    "rms_norm_f32gamma_bf16x_w5120",
};

Array NewArray(DType dtype, const std::vector<int64_t>& shape) {
  Array a;
  a.dtype = dtype;
  a.shape = shape;
  a.bytes.assign(static_cast<size_t>(a.NumElements()) * SizeOf(dtype), 0);
  return a;
}

// Glm4MoeRMSNorm's formula in float64 with no intermediate rounding:
// y = gamma * (x * (1 / sqrt(mean(x^2) + eps))). Written here on purpose, not
// taken from the library.
std::vector<double> ReferenceF64(const Array& x, const Array& gamma, double eps) {
  const int64_t width = x.shape.back();
  const int64_t rows = x.NumElements() / width;
  std::vector<double> ref(static_cast<size_t>(rows * width));
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0.0;
    for (int64_t j = 0; j < width; ++j) {
      const double v = x.At(r * width + j);
      sum += v * v;
    }
    const double inv_rms = 1.0 / std::sqrt(sum / static_cast<double>(width) + eps);
    for (int64_t j = 0; j < width; ++j) {
      ref[r * width + j] = static_cast<double>(gamma.At(j)) * (x.At(r * width + j) * inv_rms);
    }
  }
  return ref;
}

// |value - ref| in units of the float32 ulp at ref.
double UlpsFromReference(float value, double ref) {
  const float magnitude = static_cast<float>(std::fabs(ref));
  float ulp = std::nextafter(magnitude, std::numeric_limits<float>::infinity()) - magnitude;
  if (!(ulp > 0.0f)) ulp = std::numeric_limits<float>::denorm_min();
  return std::fabs(static_cast<double>(value) - ref) / static_cast<double>(ulp);
}

void CheckBf16Output(const Case& c, const Array& y) {
  const test::UlpStats stats = test::CompareUlp(DType::kBF16, AllBits(y), AllBits(c.Get("y")));
  Print(c.name, stats);
  EXPECT_TRUE(stats.MeetsBf16Bar()) << stats.Summary();
}

void CheckF32Output(const Case& c, const Array& y) {
  const Array& expected = c.Get("y");
  const std::vector<double> ref = ReferenceF64(c.Get("x"), c.Get("gamma"), c.eps);
  int64_t histogram[kMaxF32UlpsFromTorch + 2] = {};  // 0..4 ulp, more
  double max_err_ours = 0.0;
  double max_err_torch = 0.0;
  int64_t dominated = 0;  // elements where ours is no further from ref than torch
  int64_t first_far = -1;
  const int64_t n = y.NumElements();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t ulps = test::UlpDistance(DType::kF32, y.BitsAt(i), expected.BitsAt(i));
    ++histogram[ulps <= kMaxF32UlpsFromTorch ? ulps : kMaxF32UlpsFromTorch + 1];
    if (ulps > kMaxF32UlpsFromTorch && first_far < 0) first_far = i;
    const double err_ours = UlpsFromReference(y.At(i), ref[i]);
    const double err_torch = UlpsFromReference(expected.At(i), ref[i]);
    max_err_ours = std::max(max_err_ours, err_ours);
    max_err_torch = std::max(max_err_torch, err_torch);
    if (err_ours <= err_torch) ++dominated;
  }
  std::cout << "[golden] " << c.name << ": " << n << " elements, ulps from Transformers:";
  for (int64_t u = 0; u <= kMaxF32UlpsFromTorch; ++u) std::cout << " " << u << ":" << histogram[u];
  std::cout << " >" << kMaxF32UlpsFromTorch << ":" << histogram[kMaxF32UlpsFromTorch + 1]
            << "; max error vs float64 (ulps): ours " << max_err_ours << ", Transformers "
            << max_err_torch << "; ours no worse per element: " << dominated << "/" << n
            << std::endl;
  EXPECT_EQ(histogram[kMaxF32UlpsFromTorch + 1], 0)
      << "first element more than " << kMaxF32UlpsFromTorch
      << " ulp from Transformers: " << first_far;
  EXPECT_LE(max_err_ours, max_err_torch)
      << "glmnorm's worst element is further from the float64 reference than Transformers'";
}

void CheckPromotedF32Output(const Case& c, const Array& y) {
  const Array& gamma = c.Get("gamma");
  const Array& h = c.Get("h");  // Transformers' bf16(x * r)
  const Array& expected = c.Get("y");
  const int64_t width = gamma.NumElements();
  test::UlpStats stats;
  for (int64_t i = 0; i < y.NumElements(); ++i) {
    const float g = gamma.At(i % width);
    const auto h_bits = static_cast<uint16_t>(h.BitsAt(i));
    // The data itself: Transformers' y is gamma * h rounded once to f32.
    ASSERT_EQ(BitsOf(g * F32FromBF16(h_bits)), expected.BitsAt(i)) << "element " << i;
    const uint32_t ours = y.BitsAt(i);
    if (ours == expected.BitsAt(i)) {
      stats.Add(i, 0);
    } else if (ours == BitsOf(g * F32FromBF16(NextBf16(h_bits, +1))) ||
               ours == BitsOf(g * F32FromBF16(NextBf16(h_bits, -1)))) {
      stats.Add(i, 1);  // 1 bf16 ulp in the intermediate
    } else {
      stats.Add(i, 2);
    }
  }
  Print(c.name + " (ulps of the bf16 intermediate)", stats);
  EXPECT_TRUE(stats.MeetsBf16Bar()) << stats.Summary();
}

class GoldenRmsNormTest : public testing::TestWithParam<const char*> {};

TEST_P(GoldenRmsNormTest, MatchesTransformers) {
  const Case c = LoadCase(GetParam());
  ASSERT_EQ(c.kind, "rms_norm");
  const Array& x = c.Get("x");
  const Array& gamma = c.Get("gamma");
  ASSERT_EQ(gamma.shape, std::vector<int64_t>{x.shape.back()});
  const DType y_dtype = Promote(gamma.dtype, x.dtype);
  ASSERT_EQ(y_dtype, c.Get("y").dtype) << "PyTorch's promotion of (gamma, x)";
  ASSERT_EQ(c.Get("y").shape, x.shape);

  const NormOptions options;  // the defaults: cast-then-scale, GLM's eps
  ASSERT_EQ(options.rounding, Rounding::kCastThenScale);
  ASSERT_EQ(options.eps, static_cast<float>(c.eps));
  Array y = NewArray(y_dtype, x.shape);
  RmsNorm(View(x), View(gamma), MutableView(y), options);

  if (y_dtype == DType::kBF16) {
    CheckBf16Output(c, y);
  } else if (x.dtype == DType::kF32) {
    CheckF32Output(c, y);
  } else {
    CheckPromotedF32Output(c, y);
  }
}

INSTANTIATE_TEST_SUITE_P(Transformers, GoldenRmsNormTest, testing::ValuesIn(kRmsNormCases),
                         [](const testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

TEST(GoldenRmsNormCoverageTest, EveryCaseFileIsTested) {
  const std::vector<std::string> tested(std::begin(kRmsNormCases), std::end(kRmsNormCases));
  EXPECT_EQ(CaseNames("rms_norm"), tested);
}

// q_norm / k_norm through plain RmsNorm on strided 4-D views
// (batch, seq, heads, head_dim) of the fused QKV buffer, as Glm4MoeAttention
// views them: in place, and out of place into a contiguous tensor.
TEST(GoldenRmsNormOnQkvViewsTest, MatchesQNormAndKNorm) {
  const Case c = LoadCase("qk_norm_bf16_h128");
  const Array& qkv = c.Get("qkv");
  const auto& heads = c.meta.at("heads");
  const int64_t batch = c.meta.at("batch");
  const int64_t seq = c.meta.at("seq");
  const int64_t head_dim = heads.at("head_dim");
  const int64_t num_q = heads.at("num_q_heads");
  const int64_t num_k = heads.at("num_k_heads");
  const int64_t tokens = batch * seq;
  const int64_t qkv_width = qkv.shape[1];

  struct Part {
    const char* gamma;
    const char* expected;
    int64_t first_head;
    int64_t num_heads;
  };
  for (const Part& part :
       {Part{"q_gamma", "q_out", 0, num_q}, Part{"k_gamma", "k_out", num_q, num_k}}) {
    SCOPED_TRACE(part.expected);
    const int64_t col_begin = part.first_head * head_dim;
    const int64_t col_end = col_begin + part.num_heads * head_dim;
    const std::vector<uint32_t> expected = AllBits(c.Get(part.expected));

    // In place on the fused buffer.
    Array buffer = qkv;
    TensorView view;
    view.data = buffer.bytes.data() + col_begin * SizeOf(DType::kBF16);
    view.dtype = DType::kBF16;
    view.rank = 4;
    const int64_t shape[4] = {batch, seq, part.num_heads, head_dim};
    const int64_t stride[4] = {seq * qkv_width, qkv_width, head_dim, 1};
    for (int d = 0; d < 4; ++d) {
      view.shape[d] = shape[d];
      view.stride[d] = stride[d];
    }
    RmsNorm(AsConst(view), View(c.Get(part.gamma)), view);
    test::UlpStats stats = test::CompareUlp(
        DType::kBF16,
        ColumnBits(DType::kBF16, buffer.bytes.data(), tokens, qkv_width, col_begin, col_end),
        expected);
    Print(c.name + std::string(" RmsNorm in place on the ") + part.expected + " view", stats);
    EXPECT_TRUE(stats.MeetsBf16Bar()) << stats.Summary();
    // Columns outside the view are untouched.
    for (const auto& [lo, hi] : {std::pair<int64_t, int64_t>{0, col_begin}, {col_end, qkv_width}}) {
      EXPECT_EQ(ColumnBits(DType::kBF16, buffer.bytes.data(), tokens, qkv_width, lo, hi),
                ColumnBits(DType::kBF16, qkv.bytes.data(), tokens, qkv_width, lo, hi))
          << "columns [" << lo << ", " << hi << ") were written";
    }

    // Out of place into a contiguous (batch, seq, heads, head_dim) tensor.
    ConstTensorView in = AsConst(view);
    in.data = qkv.bytes.data() + col_begin * SizeOf(DType::kBF16);
    Array out = NewArray(DType::kBF16, {batch, seq, part.num_heads, head_dim});
    RmsNorm(in, View(c.Get(part.gamma)), MutableView(out));
    stats = test::CompareUlp(DType::kBF16, AllBits(out), expected);
    Print(c.name + std::string(" RmsNorm out of place from the ") + part.expected + " view", stats);
    EXPECT_TRUE(stats.MeetsBf16Bar()) << stats.Summary();
  }
}

}  // namespace
}  // namespace glmnorm::golden
