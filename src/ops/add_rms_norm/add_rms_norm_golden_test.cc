// glmnorm::AddRmsNorm against the decoder step of Transformers'
// Glm4MoeDecoderLayer in bf16 (golden data made by scripts/make_golden.py):
//
//   h = residual + delta                 torch bf16 add (f32 add, one rounding)
//   y = post_attention_layernorm(h)      Glm4MoeRMSNorm, reads the ROUNDED h
//
// Bars: the updated residual is bit-identical to h in every element; y is
// >= 99.99% bit-identical and never more than 1 ulp away.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <string>
#include <vector>

#include "glmnorm/add_rms_norm.h"
#include "support/golden_data.h"
#include "support/test_support.h"

namespace glmnorm::golden {
namespace {

const char* const kAddRmsNormCases[] = {"add_rms_norm_bf16_w5120"};

class GoldenAddRmsNormTest : public testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    c_ = LoadCase(GetParam());
    ASSERT_EQ(c_.kind, "add_rms_norm");
    ASSERT_EQ(c_.Get("residual").shape, c_.Get("delta").shape);
    ASSERT_EQ(c_.Get("h").shape, c_.Get("residual").shape);
    ASSERT_EQ(c_.Get("y").shape, c_.Get("residual").shape);
    ASSERT_EQ(options_.eps, static_cast<float>(c_.eps));
    ASSERT_EQ(options_.rounding, Rounding::kCastThenScale);
    ASSERT_TRUE(options_.normalize_rounded_sum);  // what Transformers does
  }

  void CheckResults(const std::string& label, const Array& residual, const Array& y) {
    const test::UlpStats sum_stats =
        test::CompareUlp(residual.dtype, AllBits(residual), AllBits(c_.Get("h")));
    Print(c_.name + " " + label + ", residual <- residual + delta", sum_stats);
    EXPECT_EQ(sum_stats.identical, sum_stats.elements)
        << "the residual add must round exactly like torch: " << sum_stats.Summary();

    ASSERT_EQ(y.dtype, c_.Get("y").dtype);
    const test::UlpStats y_stats = test::CompareUlp(y.dtype, AllBits(y), AllBits(c_.Get("y")));
    Print(c_.name + " " + label + ", y", y_stats);
    EXPECT_TRUE(y_stats.MeetsBf16Bar()) << y_stats.Summary();
  }

  Case c_;
  const AddNormOptions options_;  // defaults: cast-then-scale, rounded sum, GLM eps
};

TEST_P(GoldenAddRmsNormTest, MatchesDecoderLayer) {
  Array residual = c_.Get("residual");
  const Array delta = c_.Get("delta");
  Array y = c_.Get("y");
  std::fill(y.bytes.begin(), y.bytes.end(), uint8_t{0});
  AddRmsNorm(MutableView(residual), View(delta), View(c_.Get("gamma")), MutableView(y), options_);
  CheckResults("out of place", residual, y);
  EXPECT_EQ(delta.bytes, c_.Get("delta").bytes) << "delta was written";
}

// y = delta, as engines call it (allowed by add_rms_norm.h).
TEST_P(GoldenAddRmsNormTest, MatchesDecoderLayerWithOutputInDelta) {
  Array residual = c_.Get("residual");
  Array delta = c_.Get("delta");
  AddRmsNorm(MutableView(residual), View(delta), View(c_.Get("gamma")), MutableView(delta),
             options_);
  CheckResults("y in delta", residual, delta);
}

INSTANTIATE_TEST_SUITE_P(Transformers, GoldenAddRmsNormTest, testing::ValuesIn(kAddRmsNormCases),
                         [](const testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

TEST(GoldenAddRmsNormCoverageTest, EveryCaseFileIsTested) {
  const std::vector<std::string> tested(std::begin(kAddRmsNormCases), std::end(kAddRmsNormCases));
  EXPECT_EQ(CaseNames("add_rms_norm"), tested);
}

}  // namespace
}  // namespace glmnorm::golden
