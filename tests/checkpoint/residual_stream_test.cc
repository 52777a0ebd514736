// The residual-stream API against Transformers' Glm4MoeDecoderLayer.forward
// (goldens "stream/*": fixed attention/MLP outputs through every layer, then
// model.norm).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

#include "fixtures.h"
#include "glmnorm/decoder.h"
#include "glmnorm/error.h"
#include "glmnorm/safetensors.h"
#include "support/test_support.h"

namespace glmnorm {
namespace {

using ::testing::HasSubstr;

const std::string kData = GLMNORM_TEST_DATA;

// A bf16 [tokens, hidden] buffer holding a golden tensor.
struct Buffer {
  std::vector<uint16_t> v;
  int64_t rows = 0, width = 0;
  TensorView view() { return Rows<void*>(v.data(), DType::kBF16, rows, width, width); }
  ConstTensorView cview() const {
    return Rows<const void*>(v.data(), DType::kBF16, rows, width, width);
  }
};

Buffer Load(const SafetensorsFile& f, const std::string& key) {
  const SafetensorsTensor* t = f.Find(key);
  if (t == nullptr) throw Error("golden " + key + " missing");
  Buffer b;
  b.rows = t->shape[0];
  b.width = t->shape[1];
  b.v.resize(static_cast<size_t>(b.rows * b.width));
  std::memcpy(b.v.data(), f.Bytes(*t).data(), t->size());
  return b;
}

// The residual stream h must match exactly: it is a rounded sum of the same
// bf16 inputs. A normalised output may differ from PyTorch's by 1 ulp where
// x*r lies at a bf16 rounding midpoint (the float32 reduction orders differ).
::testing::AssertionResult Same(const Buffer& got, const SafetensorsFile& f, const std::string& key,
                                bool exact) {
  const Buffer want = Load(f, key);
  const test::UlpStats s = test::CompareUlp(DType::kBF16, got.v.data(), want.v.data(),
                                            static_cast<int64_t>(want.v.size()));
  if (s.nan_mismatches == 0 &&
      (s.differ() == 0 || (!exact && s.max_ulp <= 1 && s.differ() * 100 <= s.elements))) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << key << ": " << s.differ() << " of " << s.elements << " elements differ, up to "
         << s.max_ulp << " ulp, first at " << s.first_difference << "; NaN mismatches "
         << s.nan_mismatches;
}

class Stream : public ::testing::TestWithParam<bool> {};

TEST_P(Stream, MatchesTransformersDecoderLayers) {
  const bool in_place = GetParam();
  for (const char* model : {"tiny_glm45", "tiny_air"}) {
    SCOPED_TRACE(model);
    const std::string dir = kData + "/" + model;
    const CheckpointNorms ck = CheckpointNorms::Open(dir);
    const SafetensorsFile g = SafetensorsFile::Open(dir + "/goldens.safetensors");
    const ResidualStream stream = ResidualStream::FromCheckpoint(ck);
    ASSERT_EQ(stream.num_layers(), ck.config().num_hidden_layers);

    Buffer h = Load(g, "stream/h0");
    Buffer normed = h;  // attn_in / mlp_in / next input
    stream.Begin(0, h.cview(), normed.view());
    EXPECT_TRUE(Same(normed, g, "stream/attn_in.0", false));
    for (int i = 0; i < stream.num_layers(); ++i) {
      const std::string n = std::to_string(i);
      // The caller's sublayers: fixed outputs. In place, the norm overwrites them.
      Buffer attn_out = Load(g, "stream/attn_out." + n);
      Buffer mlp_in = attn_out;
      stream.AfterAttention(i, h.view(), attn_out.cview(),
                            in_place ? attn_out.view() : mlp_in.view());
      EXPECT_TRUE(Same(in_place ? attn_out : mlp_in, g, "stream/mlp_in." + n, false));
      Buffer mlp_out = Load(g, "stream/mlp_out." + n);
      Buffer next = mlp_out;
      stream.AfterMlp(i, h.view(), mlp_out.cview(), in_place ? mlp_out.view() : next.view());
      EXPECT_TRUE(Same(h, g, "stream/h." + std::to_string(i + 1), true));
      const std::string want = i + 1 < stream.num_layers()
                                   ? "stream/attn_in." + std::to_string(i + 1)
                                   : std::string("stream/final");
      EXPECT_TRUE(Same(in_place ? mlp_out : next, g, want, false));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(OutOfPlaceAndInPlace, Stream, ::testing::Bool());

TEST(ResidualStream, LayerNormsOfIncludesQkNormsOnlyWhenConfigured) {
  const CheckpointNorms glm = CheckpointNorms::Open(kData + "/tiny_glm45");
  const LayerNorms mtp = LayerNormsOf(glm, 3);  // the MTP layer's block norms
  EXPECT_EQ(mtp.q_norm.width(), 16);
  EXPECT_EQ(mtp.input_layernorm.width(), 64);
  const CheckpointNorms air = CheckpointNorms::Open(kData + "/tiny_air");
  EXPECT_EQ(LayerNormsOf(air, 1).q_norm.data, nullptr);
  EXPECT_THAT([&] { LayerNormsOf(air, 9); },
              testing::ThrowsMessage<Error>(HasSubstr("model.layers.9.input_layernorm.weight")));
}

TEST(ResidualStream, RejectsBadLayersAndShapes) {
  const CheckpointNorms ck = CheckpointNorms::Open(kData + "/tiny_air");
  const ResidualStream stream = ResidualStream::FromCheckpoint(ck);
  std::vector<uint16_t> a(2 * 48), b(2 * 48);
  const TensorView h = Rows<void*>(a.data(), DType::kBF16, 2, 48, 48);
  const TensorView y = Rows<void*>(b.data(), DType::kBF16, 2, 48, 48);
  EXPECT_THAT([&] { stream.AfterMlp(2, h, AsConst(y), y); },
              testing::ThrowsMessage<Error>(HasSubstr("layer 2 is not in [0, 2)")));
  EXPECT_THAT([&] { stream.Begin(-1, AsConst(h), y); },
              testing::ThrowsMessage<Error>(HasSubstr("layer -1")));
  const TensorView narrow = Rows<void*>(b.data(), DType::kBF16, 2, 40, 40);
  EXPECT_THROW(stream.Begin(0, AsConst(narrow), narrow), Error);
}

}  // namespace
}  // namespace glmnorm
