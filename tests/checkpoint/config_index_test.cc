// config.json and model.safetensors.index.json parsing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "io/norm_layout.h"
#include "glmnorm/checkpoint.h"
#include "glmnorm/error.h"

namespace glmnorm {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

// The fields of the released GLM-4.5 config.json that matter here.
constexpr char kGlm45Config[] = R"({
  "architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe",
  "hidden_size": 5120, "num_hidden_layers": 92, "num_attention_heads": 96,
  "num_key_value_heads": 8, "head_dim": 128, "rms_norm_eps": 1e-05,
  "use_qk_norm": true, "num_nextn_predict_layers": 1, "partial_rotary_factor": 0.5,
  "rope_scaling": null, "torch_dtype": "bfloat16"})";

TEST(ModelConfig, ParsesGlm45) {
  const ModelConfig c = ParseModelConfig(kGlm45Config, "config.json");
  EXPECT_EQ(c.model_type, "glm4_moe");
  EXPECT_EQ(c.hidden_size, 5120);
  EXPECT_EQ(c.num_hidden_layers, 92);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_TRUE(c.use_qk_norm);
  EXPECT_EQ(c.num_nextn_predict_layers, 1);
}

TEST(ModelConfig, Glm45HasTheNormsOfSpecSection5) {
  const std::vector<NormTensor> norms =
      checkpoint::ExpectedNorms(ParseModelConfig(kGlm45Config, "config.json"));
  // 93 layers x 4 norms, model.norm, and the MTP layer's enorm/hnorm/shared_head.norm.
  EXPECT_EQ(norms.size(), 93u * 4 + 1 + 3);
  int qk = 0;
  for (const NormTensor& n : norms) {
    if (n.role == NormRole::kQNorm || n.role == NormRole::kKNorm) {
      EXPECT_EQ(n.expected_width, 128) << n.name;
      ++qk;
    } else {
      EXPECT_EQ(n.expected_width, 5120) << n.name;
    }
    const auto parsed = checkpoint::ParseNormName(n.name);
    ASSERT_TRUE(parsed) << n.name;
    EXPECT_EQ(parsed->role, n.role);
    EXPECT_EQ(parsed->layer, n.layer);
  }
  EXPECT_EQ(qk, 93 * 2);
  EXPECT_EQ(norms.back().name, "model.layers.92.self_attn.k_norm.weight");
  EXPECT_FALSE(checkpoint::ParseNormName("model.layers.3.mlp.gate.weight"));
  EXPECT_FALSE(checkpoint::ParseNormName("model.layers.x.input_layernorm.weight"));
}

TEST(ModelConfig, MissingEpsIsLeftForTheNormSetToReport) {
  const ModelConfig c = ParseModelConfig(R"({"hidden_size": 8, "num_hidden_layers": 1})", "c");
  EXPECT_FALSE(c.rms_norm_eps);
  EXPECT_FALSE(c.head_dim);
}

TEST(ModelConfigBadInput, EachGivesOneClearMessage) {
  EXPECT_THAT([] { ParseModelConfig("{", "dir/config.json"); },
              ThrowsMessage<Error>(HasSubstr("dir/config.json: not valid JSON")));
  EXPECT_THAT([] { ParseModelConfig("[]", "c"); },
              ThrowsMessage<Error>(HasSubstr("c: not a JSON object")));
  EXPECT_THAT([] { ParseModelConfig(R"({"num_hidden_layers": 1})", "c"); },
              ThrowsMessage<Error>(HasSubstr("required field hidden_size is missing")));
  EXPECT_THAT([] { ParseModelConfig(R"({"hidden_size": "5120", "num_hidden_layers": 1})", "c"); },
              ThrowsMessage<Error>(HasSubstr("hidden_size must be an integer, got \"5120\"")));
  EXPECT_THAT([] { ParseModelConfig(R"({"hidden_size": -1, "num_hidden_layers": 1})", "c"); },
              ThrowsMessage<Error>(HasSubstr("hidden_size = -1 is out of range")));
  EXPECT_THAT(
      [] { ParseModelConfig(R"({"hidden_size": 8, "num_hidden_layers": 100000000})", "c"); },
      ThrowsMessage<Error>(HasSubstr("num_hidden_layers = 100000000 is out of range")));
  EXPECT_THAT(
      [] {
        ParseModelConfig(R"({"hidden_size": 8, "num_hidden_layers": 1, "rms_norm_eps": "1e-5"})",
                         "c");
      },
      ThrowsMessage<Error>(HasSubstr("rms_norm_eps must be a number")));
  EXPECT_THAT(
      [] {
        ParseModelConfig(R"({"hidden_size": 8, "num_hidden_layers": 1, "use_qk_norm": 1})", "c");
      },
      ThrowsMessage<Error>(HasSubstr("use_qk_norm must be true or false")));
  EXPECT_THAT([] { ParseModelConfig(R"({"hidden_size": 8, "hidden_size": 9})", "c"); },
              ThrowsMessage<Error>(HasSubstr("duplicate key \"hidden_size\"")));
}

TEST(ShardIndex, ParsesTheTinyCheckpointsIndexForm) {
  const ShardIndex i = ParseShardIndex(
      R"({"metadata": {"total_size": 12}, "weight_map": {"a": "m-1.safetensors",
          "b": "sub/m-2.safetensors"}})",
      "index");
  EXPECT_EQ(i.total_size, 12u);
  EXPECT_EQ(i.weight_map.at("a"), "m-1.safetensors");
  EXPECT_EQ(i.weight_map.at("b"), "sub/m-2.safetensors");
}

TEST(ShardIndexBadInput, EachGivesOneClearMessage) {
  EXPECT_THAT([] { ParseShardIndex(R"({"metadata": {}})", "ix"); },
              ThrowsMessage<Error>(HasSubstr("ix: no \"weight_map\"")));
  EXPECT_THAT([] { ParseShardIndex(R"({"weight_map": []})", "ix"); },
              ThrowsMessage<Error>(HasSubstr("weight_map is not a JSON object")));
  EXPECT_THAT([] { ParseShardIndex(R"({"weight_map": {"a": 3}})", "ix"); },
              ThrowsMessage<Error>(HasSubstr("weight_map[\"a\"] is not a file name: 3")));
  EXPECT_THAT([] { ParseShardIndex(R"({"weight_map": {"a": "x", "a": "y"}})", "ix"); },
              ThrowsMessage<Error>(HasSubstr("duplicate key \"a\"")));
  for (const char* shard : {"../secret", "/etc/passwd", "", "a/../../b", "a//b"}) {
    const std::string text = std::string(R"({"weight_map": {"t": ")") + shard + "\"}}";
    EXPECT_THAT([&] { ParseShardIndex(text, "ix"); },
                ThrowsMessage<Error>(HasSubstr("is not a file name inside the checkpoint")))
        << shard;
  }
}

}  // namespace
}  // namespace glmnorm
