// glmnorm::RmsNormBackward against torch autograd through Transformers'
// Glm4MoeRMSNorm (golden data made by scripts/make_golden.py): x.grad and
// weight.grad for incoming gradients dy, bf16 and f32.
//
// Bars (docs/BACKWARD.md): bf16 dx within 1 ulp of torch's in >= 99.9% of
// the elements; f32 dx within 2 * kF32DxUlps ulp of the condition-aware
// scale (each side within its own bound of the float64 truth); dgamma: the
// same products as torch, summed in another order: bf16 within 1 ulp, f32
// within 2e-5 of sum|terms| (each side's float32 sum within 1e-5).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <string>
#include <vector>

#include "glmnorm/rms_norm_backward.h"
#include "ops/backward_golden_util.h"
#include "support/golden_data.h"
#include "support/test_support.h"

namespace glmnorm::golden {
namespace {

const char* const kCases[] = {"rms_norm_backward_bf16_w128", "rms_norm_backward_bf16_w5120",
                              "rms_norm_backward_f32_w128"};

class GoldenRmsNormBackwardTest : public testing::TestWithParam<const char*> {};

TEST_P(GoldenRmsNormBackwardTest, MatchesTorchAutograd) {
  const Case c = LoadCase(GetParam());
  ASSERT_EQ(c.kind, "rms_norm_backward");
  NormOptions opt;
  ASSERT_EQ(opt.eps, static_cast<float>(c.eps));
  const Array& x = c.Get("x");
  const Array& gamma = c.Get("gamma");
  const Array& dy = c.Get("dy");
  Array dx = c.Get("dx");
  Array dgamma = c.Get("dgamma");
  std::fill(dx.bytes.begin(), dx.bytes.end(), uint8_t{0});
  std::fill(dgamma.bytes.begin(), dgamma.bytes.end(), uint8_t{0});
  test::ForEachTarget([&](const char* target) {
    RmsNormBackward(View(x), View(gamma), View(dy), MutableView(dx), MutableView(dgamma), opt);
    bwdgolden::CheckAgainstTorch(c.name + " " + target, View(x), View(gamma), View(dy), {}, opt,
                                 dx, c.Get("dx"), dgamma, c.Get("dgamma"));
  });
}

INSTANTIATE_TEST_SUITE_P(Transformers, GoldenRmsNormBackwardTest, testing::ValuesIn(kCases),
                         [](const testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

TEST(GoldenRmsNormBackwardCoverageTest, EveryCaseFileIsTested) {
  const std::vector<std::string> tested(std::begin(kCases), std::end(kCases));
  EXPECT_EQ(CaseNames("rms_norm_backward"), tested);
}

}  // namespace
}  // namespace glmnorm::golden
