// glmnorm::AddRmsNormBackward against torch autograd through the decoder
// step of Transformers' Glm4MoeDecoderLayer in bf16 (scripts/make_golden.py):
// h = residual + delta; y = post_attention_layernorm(h); incoming gradients
// dy (of y) and d_residual_out (of h, which is also the residual stream's
// output). torch's residual.grad (= delta.grad) is d_h. Bars as
// rms_norm_backward_golden_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>
#include <string>
#include <vector>

#include "glmnorm/add_rms_norm_backward.h"
#include "ops/backward_golden_util.h"
#include "support/golden_data.h"
#include "support/test_support.h"

namespace glmnorm::golden {
namespace {

const char* const kCases[] = {"add_rms_norm_backward_bf16_w4096"};

class GoldenAddRmsNormBackwardTest : public testing::TestWithParam<const char*> {};

TEST_P(GoldenAddRmsNormBackwardTest, MatchesTorchAutograd) {
  const Case c = LoadCase(GetParam());
  ASSERT_EQ(c.kind, "add_rms_norm_backward");
  AddNormOptions opt;
  ASSERT_EQ(opt.eps, static_cast<float>(c.eps));
  const Array& h = c.Get("h");
  const Array& gamma = c.Get("gamma");
  const Array& dy = c.Get("dy");
  const Array& dres = c.Get("d_residual_out");
  Array d_h = c.Get("d_h");
  Array dgamma = c.Get("dgamma");
  test::ForEachTarget([&](const char* target) {
    std::fill(d_h.bytes.begin(), d_h.bytes.end(), uint8_t{0});
    std::fill(dgamma.bytes.begin(), dgamma.bytes.end(), uint8_t{0});
    AddRmsNormBackward(View(h), View(gamma), View(dy), View(dres), MutableView(d_h), {},
                       MutableView(dgamma), opt);
    bwdgolden::CheckAgainstTorch(c.name + " " + target, View(h), View(gamma), View(dy),
                                 View(dres), opt, d_h, c.Get("d_h"), dgamma, c.Get("dgamma"));
  });
}

INSTANTIATE_TEST_SUITE_P(Transformers, GoldenAddRmsNormBackwardTest, testing::ValuesIn(kCases),
                         [](const testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

TEST(GoldenAddRmsNormBackwardCoverageTest, EveryCaseFileIsTested) {
  const std::vector<std::string> tested(std::begin(kCases), std::end(kCases));
  EXPECT_EQ(CaseNames("add_rms_norm_backward"), tested);
}

}  // namespace
}  // namespace glmnorm::golden
