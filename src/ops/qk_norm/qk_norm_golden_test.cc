// glmnorm::QkNorm against Transformers' self_attn.q_norm / k_norm
// (Glm4MoeRMSNorm of width head_dim, their own gammas) applied to the
// (batch, seq, heads, head_dim) views of q and k inside a fused bf16 QKV
// buffer, before RoPE (golden data made by scripts/make_golden.py).
//
// Bars: q and k parts >= 99.99% bit-identical and never more than 1 ulp away;
// v columns (and any row padding) untouched; out of place, the input is not
// written.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <string>
#include <vector>

#include "glmnorm/qk_norm.h"
#include "support/golden_data.h"
#include "support/test_support.h"

namespace glmnorm::golden {
namespace {

const char* const kQkNormCases[] = {"qk_norm_bf16_h128"};

// Bits written into output buffers beforehand, to see what a call wrote.
constexpr uint8_t kSentinelByte = 0x5A;

class GoldenQkNormTest : public testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    c_ = LoadCase(GetParam());
    ASSERT_EQ(c_.kind, "qk_norm");
    const auto& h = c_.meta.at("heads");
    heads_.num_q_heads = h.at("num_q_heads");
    heads_.num_k_heads = h.at("num_k_heads");
    heads_.num_v_heads = h.at("num_v_heads");
    heads_.head_dim = h.at("head_dim");
    tokens_ = c_.meta.at("tokens");
    width_ =
        int64_t{heads_.num_q_heads + heads_.num_k_heads + heads_.num_v_heads} * heads_.head_dim;
    q_end_ = int64_t{heads_.num_q_heads} * heads_.head_dim;
    k_end_ = q_end_ + int64_t{heads_.num_k_heads} * heads_.head_dim;
    ASSERT_EQ(c_.Get("qkv").shape, (std::vector<int64_t>{tokens_, width_}));
    ASSERT_EQ(c_.Get("q_out").NumElements(), tokens_ * q_end_);
    ASSERT_EQ(c_.Get("k_out").NumElements(), tokens_ * (k_end_ - q_end_));
    ASSERT_EQ(options_.eps, static_cast<float>(c_.eps));
    ASSERT_EQ(options_.rounding, Rounding::kCastThenScale);
  }

  // A bf16 buffer of tokens_ rows, row_stride elements apart.
  std::vector<uint8_t> Buffer(int64_t row_stride, uint8_t fill) const {
    return std::vector<uint8_t>(static_cast<size_t>(tokens_ * row_stride) * 2, fill);
  }

  void CopyQkvInto(std::vector<uint8_t>& buffer, int64_t row_stride) const {
    const auto& qkv = c_.Get("qkv").bytes;
    for (int64_t t = 0; t < tokens_; ++t) {
      std::copy_n(qkv.begin() + t * width_ * 2, width_ * 2, buffer.begin() + t * row_stride * 2);
    }
  }

  void CheckQk(const std::string& label, const std::vector<uint8_t>& out, int64_t row_stride) {
    const test::UlpStats q_stats = test::CompareUlp(
        DType::kBF16, ColumnBits(DType::kBF16, out.data(), tokens_, row_stride, 0, q_end_),
        AllBits(c_.Get("q_out")));
    Print(c_.name + " " + label + ", q", q_stats);
    EXPECT_TRUE(q_stats.MeetsBf16Bar()) << q_stats.Summary();
    const test::UlpStats k_stats = test::CompareUlp(
        DType::kBF16, ColumnBits(DType::kBF16, out.data(), tokens_, row_stride, q_end_, k_end_),
        AllBits(c_.Get("k_out")));
    Print(c_.name + " " + label + ", k", k_stats);
    EXPECT_TRUE(k_stats.MeetsBf16Bar()) << k_stats.Summary();
  }

  std::vector<uint32_t> Columns(const std::vector<uint8_t>& buffer, int64_t row_stride,
                                int64_t begin, int64_t end) const {
    return ColumnBits(DType::kBF16, buffer.data(), tokens_, row_stride, begin, end);
  }

  Case c_;
  QkHeads heads_;
  int64_t tokens_ = 0;
  int64_t width_ = 0;
  int64_t q_end_ = 0;          // first k column
  int64_t k_end_ = 0;          // first v column
  const NormOptions options_;  // defaults: cast-then-scale, GLM's eps
};

TEST_P(GoldenQkNormTest, OutOfPlace) {
  const Array& qkv = c_.Get("qkv");
  const std::vector<uint8_t> qkv_before = qkv.bytes;
  std::vector<uint8_t> out = Buffer(width_, kSentinelByte);
  const std::vector<uint8_t> untouched = out;
  QkNorm(Rows(static_cast<const void*>(qkv.bytes.data()), DType::kBF16, tokens_, width_, width_),
         Rows(static_cast<void*>(out.data()), DType::kBF16, tokens_, width_, width_), heads_,
         View(c_.Get("q_gamma")), View(c_.Get("k_gamma")), options_);
  CheckQk("out of place", out, width_);
  EXPECT_EQ(Columns(out, width_, k_end_, width_), Columns(untouched, width_, k_end_, width_))
      << "v columns of the output were written";
  EXPECT_EQ(qkv.bytes, qkv_before) << "the input was written";
}

TEST_P(GoldenQkNormTest, InPlace) {
  std::vector<uint8_t> buffer = c_.Get("qkv").bytes;
  void* data = buffer.data();
  QkNorm(Rows(static_cast<const void*>(data), DType::kBF16, tokens_, width_, width_),
         Rows(data, DType::kBF16, tokens_, width_, width_), heads_, View(c_.Get("q_gamma")),
         View(c_.Get("k_gamma")), options_);
  CheckQk("in place", buffer, width_);
  EXPECT_EQ(Columns(buffer, width_, k_end_, width_),
            Columns(c_.Get("qkv").bytes, width_, k_end_, width_))
      << "v columns were written";
}

// In place in a buffer whose rows are padded (row stride > QKV width), as in
// an engine's workspace: the padding is never touched either.
TEST_P(GoldenQkNormTest, InPlaceWithPaddedRows) {
  const int64_t row_stride = width_ + 3 * heads_.head_dim + 5;
  std::vector<uint8_t> buffer = Buffer(row_stride, kSentinelByte);
  CopyQkvInto(buffer, row_stride);
  const std::vector<uint8_t> before = buffer;
  void* data = buffer.data();
  QkNorm(Rows(static_cast<const void*>(data), DType::kBF16, tokens_, width_, row_stride),
         Rows(data, DType::kBF16, tokens_, width_, row_stride), heads_, View(c_.Get("q_gamma")),
         View(c_.Get("k_gamma")), options_);
  CheckQk("in place, padded rows", buffer, row_stride);
  EXPECT_EQ(Columns(buffer, row_stride, k_end_, row_stride),
            Columns(before, row_stride, k_end_, row_stride))
      << "v columns or row padding were written";
}

INSTANTIATE_TEST_SUITE_P(Transformers, GoldenQkNormTest, testing::ValuesIn(kQkNormCases),
                         [](const testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

TEST(GoldenQkNormCoverageTest, EveryCaseFileIsTested) {
  const std::vector<std::string> tested(std::begin(kQkNormCases), std::end(kQkNormCases));
  EXPECT_EQ(CaseNames("qk_norm"), tested);
}

}  // namespace
}  // namespace glmnorm::golden
