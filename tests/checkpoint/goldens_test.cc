// Every norm of the tiny checkpoints, applied with the checkpoint's own gamma
// and eps, reproduces Transformers' Glm4MoeRMSNorm (goldens.safetensors, made
// by scripts/make_tiny_checkpoint.py): within the library's ulp promise, and
// bf16 outputs almost always bit for bit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

#include <nlohmann/json.hpp>

#include "fixtures.h"
#include "glmnorm/checkpoint.h"
#include "glmnorm/rms_norm.h"
#include "glmnorm/safetensors.h"
#include "support/test_support.h"

namespace glmnorm {
namespace {

const std::string kData = GLMNORM_TEST_DATA;

// Runs norm `name` on golden input `x_key` and compares with `y_key`.
test::UlpStats CheckGolden(const CheckpointNorms& ck, const SafetensorsFile& goldens,
                           const std::string& name, const std::string& x_key,
                           const std::string& y_key, Rounding rounding = Rounding::kCastThenScale) {
  const SafetensorsTensor* xt = goldens.Find(x_key);
  const SafetensorsTensor* yt = goldens.Find(y_key);
  EXPECT_NE(xt, nullptr) << x_key;
  EXPECT_NE(yt, nullptr) << y_key;
  if (xt == nullptr || yt == nullptr) return {};
  const ConstTensorView x = goldens.View(*xt);
  const ConstTensorView want = goldens.View(*yt);
  const ConstTensorView gamma = ck.Gamma(name);
  // PyTorch's result dtype of weight * activation (docs/SPEC.md §2).
  EXPECT_EQ(want.dtype, Promote(gamma.dtype, x.dtype)) << y_key;
  std::vector<std::byte> out(yt->size());
  TensorView y;
  y.data = out.data();
  y.dtype = want.dtype;
  y.rank = x.rank;
  for (int i = 0; i < x.rank; ++i) {
    y.shape[i] = x.shape[i];
    y.stride[i] = x.stride[i];
  }
  RmsNorm(x, gamma, y, ck.Options(rounding));
  const int64_t elements = static_cast<int64_t>(yt->size() / SizeOf(want.dtype));
  const test::UlpStats s = test::CompareUlp(want.dtype, out.data(), want.data, elements);
  EXPECT_LE(s.max_ulp, test::UlpLimit(want.dtype))
      << name << " on " << x_key << ": first difference at element " << s.first_difference;
  EXPECT_EQ(s.nan_mismatches, 0)
      << name << " on " << x_key << ": NaN sign or NaN-ness differs at element "
      << s.first_nan_mismatch;
  if (want.dtype != DType::kF32) {
    // bf16 rounding hides the float32 reduction order: a difference needs
    // x*r within ~2^-16 of a rounding midpoint, so nearly all are identical.
    EXPECT_LE(s.differ() * 100, elements)
        << name << " on " << x_key << ": " << s.differ() << " of " << elements << " outputs differ";
  }
  return s;
}

class Goldens : public ::testing::TestWithParam<const char*> {};

TEST_P(Goldens, EveryNormMatchesTransformers) {
  const std::string dir = kData + "/" + GetParam();
  const CheckpointNorms ck = CheckpointNorms::Open(dir);
  const SafetensorsFile goldens = SafetensorsFile::Open(dir + "/goldens.safetensors");
  const auto provenance = nlohmann::json::parse(goldens.metadata().at("provenance"));
  EXPECT_EQ(provenance.at("eps").get<double>(), 1e-5);
  EXPECT_EQ(static_cast<float>(provenance.at("eps").get<double>()), ck.eps());
  int64_t compared = 0, differ = 0;
  int norms = 0;
  auto check = [&](const std::string& name, const std::string& x, const std::string& y) {
    const test::UlpStats s = CheckGolden(ck, goldens, name, x, y);
    compared += s.elements;
    differ += s.differ();
  };
  for (const NormTensor& n : ck.norms()) {
    check(n.name, "x/" + n.name, "y/" + n.name);
    ++norms;
    if (goldens.Find("xf32/" + n.name) != nullptr) {
      check(n.name, "xf32/" + n.name, "yf32/" + n.name);
    }
  }
  EXPECT_EQ(norms, static_cast<int>(ck.norms().size()));
  EXPECT_GT(compared, 1000);
  std::printf("[glmnorm] %lld outputs compared with Transformers, %lld not bit-identical\n",
              static_cast<long long>(compared), static_cast<long long>(differ));
}

TEST_P(Goldens, SingleRoundingIsADifferentFunction) {
  // The golden is cast-then-scale; with two roundings vs one, some bf16
  // outputs must differ (by 1 ulp), or the test data could not tell them apart.
  const std::string dir = kData + "/" + GetParam();
  const CheckpointNorms ck = CheckpointNorms::Open(dir);
  const SafetensorsFile goldens = SafetensorsFile::Open(dir + "/goldens.safetensors");
  const std::string name = "model.norm.weight";
  const SafetensorsTensor& xt = *goldens.Find("x/" + name);
  const SafetensorsTensor& yt = *goldens.Find("y/" + name);
  const ConstTensorView x = goldens.View(xt);
  std::vector<uint16_t> out(static_cast<size_t>(x.rows() * x.width()));
  RmsNorm(x, ck.Gamma(name), Rows<void*>(out.data(), DType::kBF16, x.rows(), x.width(), x.width()),
          ck.Options(Rounding::kSingle));
  const test::UlpStats s = test::CompareUlp(DType::kBF16, out.data(), goldens.Bytes(yt).data(),
                                            static_cast<int64_t>(out.size()));
  EXPECT_LE(s.max_ulp, 1) << "more than 1 ulp at " << s.first_worse;
  EXPECT_EQ(s.bit_mismatches, s.differ()) << "a zero or a NaN of the other sign";
  EXPECT_GT(s.differ(), 0);
}

INSTANTIATE_TEST_SUITE_P(TinyCheckpoints, Goldens, ::testing::Values("tiny_glm45", "tiny_air"));

}  // namespace
}  // namespace glmnorm
