// CheckpointNorms on the tiny Transformers-made checkpoints and on synthetic
// broken ones: every check, every problem message.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>

#include "fixtures.h"
#include "glmnorm/checkpoint.h"
#include "glmnorm/error.h"
#include "glmnorm/safetensors.h"

namespace glmnorm {
namespace {

using test::FakeCheckpoint;
using ::testing::AllOf;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::ThrowsMessage;

const std::string kData = GLMNORM_TEST_DATA;

// The shards of a checkpoint that hold at least one "norm" tensor, per its index.
std::set<std::string> ShardsWithNorms(const std::string& dir, std::set<std::string>* all) {
  const ShardIndex index =
      ParseShardIndex(test::ReadFile(dir + "/model.safetensors.index.json"), "index");
  std::set<std::string> out;
  for (const auto& [name, shard] : index.weight_map) {
    all->insert(shard);
    if (name.find("norm.weight") != std::string::npos) out.insert(shard);
  }
  return out;
}

TEST(CheckpointNorms, OpensTheTinyGlm45Checkpoint) {
  const std::string dir = kData + "/tiny_glm45";
  const CheckpointNorms ck = CheckpointNorms::Open(dir);
  EXPECT_THAT(ck.problems(), IsEmpty());
  EXPECT_TRUE(ck.sound());
  EXPECT_EQ(ck.model_name(), "glm4_moe");
  EXPECT_EQ(ck.config().hidden_size, 64);
  EXPECT_EQ(ck.config().head_dim, 16);  // not 64 / 6: from the kwarg
  EXPECT_TRUE(ck.config().use_qk_norm);
  EXPECT_EQ(ck.eps(), 1e-5f);
  // 3 layers x 4 + model.norm + MTP (3 + 4).
  ASSERT_EQ(ck.norms().size(), 20u);
  for (const NormTensor& n : ck.norms()) {
    EXPECT_TRUE(n.usable()) << n.name;
    EXPECT_EQ(n.dtype, "BF16");
    EXPECT_EQ(n.gamma.dtype, DType::kBF16);
    EXPECT_EQ(n.gamma.width(), n.expected_width) << n.name;
    EXPECT_LT(n.stats.min, n.stats.mean);
    EXPECT_LT(n.stats.mean, n.stats.max);
  }
  EXPECT_EQ(ck.Gamma("model.layers.0.self_attn.q_norm.weight").width(), 16);
  EXPECT_EQ(ck.Gamma("model.layers.3.enorm.weight").width(), 64);
  EXPECT_EQ(ck.Find("model.layers.3.shared_head.norm.weight")->role, NormRole::kMtpSharedHeadNorm);

  // The gammas are the bytes the safetensors library wrote.
  const NormTensor& final_norm = *ck.Find("model.norm.weight");
  const SafetensorsFile shard = SafetensorsFile::Open(dir + "/" + final_norm.shard);
  const auto bytes = shard.Bytes(*shard.Find("model.norm.weight"));
  EXPECT_EQ(std::memcmp(final_norm.gamma.data, bytes.data(), bytes.size()), 0);
}

TEST(CheckpointNorms, MapsOnlyTheShardsThatHoldNorms) {
  for (const char* model : {"tiny_glm45", "tiny_air"}) {
    const std::string dir = kData + "/" + model;
    std::set<std::string> all;
    const std::set<std::string> with_norms = ShardsWithNorms(dir, &all);
    const CheckpointNorms ck = CheckpointNorms::Open(dir);
    const std::vector<std::string> mapped = ck.mapped_shards();
    EXPECT_EQ(std::set<std::string>(mapped.begin(), mapped.end()), with_norms) << model;
    EXPECT_LT(with_norms.size(), all.size()) << model << ": the test needs norm-free shards";
  }
}

TEST(CheckpointNorms, OpensTheTinyAirCheckpoint) {
  const CheckpointNorms ck = CheckpointNorms::Open(kData + "/tiny_air/");
  EXPECT_THAT(ck.problems(), IsEmpty());
  EXPECT_FALSE(ck.config().use_qk_norm);
  ASSERT_EQ(ck.norms().size(), 2u * 2 + 1 + 5);
  for (const NormTensor& n : ck.norms()) {
    EXPECT_NE(n.role, NormRole::kQNorm);
    EXPECT_EQ(n.gamma.width(), 48);
  }
  EXPECT_THAT([&] { ck.Gamma("model.layers.0.self_attn.q_norm.weight"); },
              ThrowsMessage<Error>(HasSubstr("is not a norm of this glm4_moe model")));
}

TEST(CheckpointNorms, ViewsSurviveAMove) {
  CheckpointNorms a = CheckpointNorms::Open(kData + "/tiny_air");
  const ConstTensorView before = a.Gamma("model.norm.weight");
  const uint16_t first = *static_cast<const uint16_t*>(before.data);
  CheckpointNorms b = std::move(a);
  EXPECT_EQ(b.Gamma("model.norm.weight").data, before.data);
  EXPECT_EQ(*static_cast<const uint16_t*>(b.Gamma("model.norm.weight").data), first);
}

// --- Synthetic checkpoints --------------------------------------------------

class FakeCheckpointTest : public ::testing::Test {
 protected:
  CheckpointNorms Open() {
    fake_.Write(dir_.path());
    return CheckpointNorms::Open(dir_.path());
  }
  std::string OpenError() {
    try {
      Open();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  FakeCheckpoint::Tensor& T(const std::string& name) { return fake_.tensors.at(name).second; }

  test::TempDir dir_;
  FakeCheckpoint fake_;
};

TEST_F(FakeCheckpointTest, SoundBaselineMapsTwoOfThreeShards) {
  const CheckpointNorms ck = Open();
  EXPECT_THAT(ck.problems(), IsEmpty());
  EXPECT_EQ(ck.norms().size(), 3u * 4 + 1 + 3);
  EXPECT_THAT(ck.mapped_shards(),
              ElementsAre("model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors"));
  const NormOptions options = ck.Options(Rounding::kSingle);
  EXPECT_EQ(options.eps, 1e-5f);
  EXPECT_EQ(options.rounding, Rounding::kSingle);
}

TEST_F(FakeCheckpointTest, SingleFileCheckpoint) {
  fake_.write_index = false;
  const CheckpointNorms ck = Open();
  EXPECT_THAT(ck.problems(), IsEmpty());
  EXPECT_THAT(ck.mapped_shards(), ElementsAre("model.safetensors"));
}

TEST_F(FakeCheckpointTest, NotACheckpointDirectory) {
  test::WriteFile(dir_ / "config.json", fake_.config.dump());
  EXPECT_THAT([&] { CheckpointNorms::Open(dir_.path()); },
              ThrowsMessage<Error>(
                  AllOf(HasSubstr(dir_.path()), HasSubstr("no model.safetensors.index.json and no "
                                                          "model.safetensors"))));
}

TEST_F(FakeCheckpointTest, ConfigMissing) {
  fake_.Write(dir_.path());
  std::remove((dir_ / "config.json").c_str());
  EXPECT_THAT([&] { CheckpointNorms::Open(dir_.path()); },
              ThrowsMessage<Error>(AllOf(HasSubstr(dir_ / "config.json"),
                                         HasSubstr("cannot open: No such file or directory"))));
}

TEST_F(FakeCheckpointTest, ConfigWithoutEps) {
  fake_.config.erase("rms_norm_eps");
  const CheckpointNorms ck = Open();
  EXPECT_THAT(ck.problems(), ElementsAre(HasSubstr("config.json: rms_norm_eps is missing")));
  EXPECT_THAT([&] { ck.eps(); }, ThrowsMessage<Error>(HasSubstr("rms_norm_eps is missing")));
  EXPECT_THAT([&] { ck.Options(); }, ThrowsMessage<Error>(HasSubstr("rms_norm_eps is missing")));
}

TEST_F(FakeCheckpointTest, EpsOfOneMillionthIsFlagged) {
  fake_.config["rms_norm_eps"] = 1e-6;
  const CheckpointNorms ck = Open();
  EXPECT_THAT(ck.problems(), ElementsAre(AllOf(HasSubstr("rms_norm_eps is 1e-06"),
                                               HasSubstr("GLM-4.5 checkpoints use 1e-05"))));
  EXPECT_EQ(ck.eps(), 1e-6f);  // still what the config says: a warning, not a refusal
}

TEST_F(FakeCheckpointTest, NegativeEps) {
  fake_.config["rms_norm_eps"] = -1.0;
  const CheckpointNorms ck = Open();
  EXPECT_THAT(ck.problems(), ElementsAre(HasSubstr("rms_norm_eps = -1 is not a small")));
  EXPECT_THAT([&] { ck.eps(); }, ThrowsMessage<Error>(HasSubstr("is invalid")));
}

TEST_F(FakeCheckpointTest, HeadDimMissingWithQkNorm) {
  fake_.config.erase("head_dim");
  const CheckpointNorms ck = Open();
  EXPECT_THAT(ck.problems(), Contains(AllOf(HasSubstr("head_dim is missing"),
                                            HasSubstr("hidden_size / num_attention_heads = 2"))));
}

TEST_F(FakeCheckpointTest, OtherModelType) {
  fake_.config["model_type"] = "llama";
  const CheckpointNorms ck = Open();
  EXPECT_EQ(ck.model_name(), "llama");
  EXPECT_THAT(ck.problems(), ElementsAre(HasSubstr("model_type is \"llama\", expected")));
}

TEST_F(FakeCheckpointTest, MissingNorm) {
  fake_.tensors.erase("model.layers.1.post_attention_layernorm.weight");
  const CheckpointNorms ck = Open();
  EXPECT_THAT(ck.problems(),
              ElementsAre("missing norm model.layers.1.post_attention_layernorm.weight "
                          "(post_attention_layernorm, expected [8])"));
  EXPECT_FALSE(ck.Find("model.layers.1.post_attention_layernorm.weight")->present);
  EXPECT_THAT([&] { ck.Gamma("model.layers.1.post_attention_layernorm.weight"); },
              ThrowsMessage<Error>(AllOf(HasSubstr("cannot use"), HasSubstr("missing norm"))));
  // The other norms stay usable.
  EXPECT_EQ(ck.Gamma("model.layers.1.input_layernorm.weight").width(), 8);
}

TEST_F(FakeCheckpointTest, MissingMtpNorm) {
  fake_.tensors.erase("model.layers.2.hnorm.weight");
  EXPECT_THAT(Open().problems(),
              ElementsAre(HasSubstr("missing norm model.layers.2.hnorm.weight (mtp_hnorm")));
}

TEST_F(FakeCheckpointTest, IndexMapsANormToAShardWithoutIt) {
  fake_.tensors.erase("model.norm.weight");
  fake_.extra_index["model.norm.weight"] = "model-00001-of-00003.safetensors";
  EXPECT_THAT(Open().problems(),
              ElementsAre("missing norm model.norm.weight: model.safetensors.index.json maps it "
                          "to model-00001-of-00003.safetensors, which does not contain it"));
}

TEST_F(FakeCheckpointTest, IndexNamesAMissingShardHoldingNorms) {
  fake_.Write(dir_.path());
  std::remove((dir_ / "model-00002-of-00003.safetensors").c_str());
  EXPECT_THAT([&] { CheckpointNorms::Open(dir_.path()); },
              ThrowsMessage<Error>(AllOf(HasSubstr("model-00002-of-00003.safetensors: cannot open"),
                                         HasSubstr("No such file"))));
}

TEST_F(FakeCheckpointTest, IndexNamesAMissingShardWithoutNorms) {
  fake_.extra_index["model.layers.0.mlp.gate.weight"] = "model-00009-of-00009.safetensors";
  EXPECT_THAT(Open().problems(),
              ElementsAre("model.safetensors.index.json names shard "
                          "model-00009-of-00009.safetensors (1 tensors), which does not exist"));
}

TEST_F(FakeCheckpointTest, CorruptShardHoldingNorms) {
  fake_.Write(dir_.path());
  test::WriteFile(dir_ / "model-00001-of-00003.safetensors",
                  std::string("\x05\0\0\0\0\0\0\0{\"a\":", 13));
  EXPECT_THAT([&] { CheckpointNorms::Open(dir_.path()); },
              ThrowsMessage<Error>(AllOf(HasSubstr("model-00001-of-00003.safetensors: header"),
                                         HasSubstr("not valid JSON"))));
}

TEST_F(FakeCheckpointTest, NanAndInfGamma) {
  std::vector<float> v(8, 1.0f);
  v[3] = std::nanf("");
  T("model.layers.0.input_layernorm.weight").bytes = test::BytesOf(test::Bf16(v));
  v[3] = 1.0f;
  v[5] = -INFINITY;
  v[6] = INFINITY;
  T("model.norm.weight").bytes = test::BytesOf(test::Bf16(v));
  const CheckpointNorms ck = Open();
  EXPECT_THAT(
      ck.problems(),
      ElementsAre("model.layers.0.input_layernorm.weight: gamma has 1 NaN and 0 inf "
                  "values (first at index 3)",
                  "model.norm.weight: gamma has 0 NaN and 2 inf values (first at index 5)"));
  EXPECT_FALSE(ck.Find("model.norm.weight")->usable());
  EXPECT_THAT([&] { ck.Gamma("model.norm.weight"); },
              ThrowsMessage<Error>(HasSubstr("2 inf values")));
}

TEST_F(FakeCheckpointTest, HiddenWidthGammaOnAQkNorm) {
  T("model.layers.1.self_attn.k_norm.weight") = FakeCheckpoint::Gamma(8);
  EXPECT_THAT(Open().problems(),
              ElementsAre(AllOf(HasSubstr("model.layers.1.self_attn.k_norm.weight: width 8 is "
                                          "hidden_size, but a QK-norm gamma has head_dim (4)"),
                                HasSubstr("hidden-width gamma on a QK-norm"))));
}

TEST_F(FakeCheckpointTest, WrongWidths) {
  T("model.layers.0.input_layernorm.weight") = FakeCheckpoint::Gamma(7);
  T("model.layers.0.self_attn.q_norm.weight") = FakeCheckpoint::Gamma(5);
  EXPECT_THAT(Open().problems(),
              ElementsAre("model.layers.0.input_layernorm.weight: width 7, expected hidden_size 8",
                          "model.layers.0.self_attn.q_norm.weight: width 5, expected head_dim 4"));
}

TEST_F(FakeCheckpointTest, WrongDtypesAndShapes) {
  T("model.layers.0.input_layernorm.weight") =
      FakeCheckpoint::Tensor{"F64", {8}, std::vector<std::byte>(64)};
  T("model.layers.0.post_attention_layernorm.weight") =
      FakeCheckpoint::Tensor{"I8", {8}, std::vector<std::byte>(8)};
  FakeCheckpoint::Tensor two_d = FakeCheckpoint::Gamma(8);
  two_d.shape = {2, 4};
  T("model.norm.weight") = two_d;
  EXPECT_THAT(Open().problems(),
              ElementsAre("model.layers.0.input_layernorm.weight: dtype F64, expected BF16, F16 "
                          "or F32",
                          "model.layers.0.post_attention_layernorm.weight: dtype I8, expected "
                          "BF16, F16 or F32",
                          "model.norm.weight: shape [2, 4], expected a 1-D gamma [8]"));
}

TEST_F(FakeCheckpointTest, F32AndF16GammasAreFine) {
  const std::vector<float> f32(8, 0.5f);
  T("model.norm.weight") = FakeCheckpoint::Tensor{"F32", {8}, test::BytesOf(f32)};
  const std::vector<uint16_t> f16(4, F16FromF32(2.0f));
  T("model.layers.0.self_attn.q_norm.weight") =
      FakeCheckpoint::Tensor{"F16", {4}, test::BytesOf(f16)};
  const CheckpointNorms ck = Open();
  EXPECT_THAT(ck.problems(), IsEmpty());
  EXPECT_EQ(ck.Gamma("model.norm.weight").dtype, DType::kF32);
  EXPECT_EQ(ck.Find("model.norm.weight")->stats.mean, 0.5f);
  EXPECT_EQ(ck.Gamma("model.layers.0.self_attn.q_norm.weight").dtype, DType::kF16);
  EXPECT_EQ(ck.Find("model.layers.0.self_attn.q_norm.weight")->stats.max, 2.0f);
}

TEST(CheckpointNormsAir, UnexpectedQkNormWhenConfigSaysNone) {
  test::TempDir dir;
  FakeCheckpoint fake(/*use_qk_norm=*/false);
  fake.tensors["model.layers.1.self_attn.q_norm.weight"] = {"model-00002-of-00003.safetensors",
                                                            FakeCheckpoint::Gamma(4)};
  fake.tensors["model.layers.7.input_layernorm.weight"] = {"model-00002-of-00003.safetensors",
                                                           FakeCheckpoint::Gamma(8)};
  fake.Write(dir.path());
  const CheckpointNorms ck = CheckpointNorms::Open(dir.path());
  EXPECT_THAT(ck.problems(),
              ElementsAre("unexpected norm model.layers.1.self_attn.q_norm.weight: config.json "
                          "has use_qk_norm false, so this gamma would be ignored",
                          "unexpected norm model.layers.7.input_layernorm.weight: layer 7 is "
                          "beyond num_hidden_layers + num_nextn_predict_layers = 3"));
}

TEST(CheckpointNormsAlignment, UnalignedGammaIsCopied) {
  // model.norm.weight at data offset 1: the format allows it, the kernels
  // need aligned elements.
  test::TempDir dir;
  test::WriteFile(dir / "config.json",
                  R"({"model_type": "glm4_moe", "hidden_size": 4, "num_hidden_layers": 0,
                      "rms_norm_eps": 1e-5})");
  std::string header = R"({"pad":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                       R"("model.norm.weight":{"dtype":"BF16","shape":[4],"data_offsets":[1,9]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::vector<std::byte> image = test::RawSafetensors(header, 9);
  const std::vector<uint16_t> gamma = test::Bf16({1.5f, 2.0f, -3.0f, 0.25f});
  std::memcpy(image.data() + image.size() - 8, gamma.data(), 8);
  test::WriteFile(dir / "model.safetensors", image);
  const CheckpointNorms ck = CheckpointNorms::Open(dir.path());
  EXPECT_THAT(ck.problems(), IsEmpty());
  const ConstTensorView g = ck.Gamma("model.norm.weight");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(g.data) % 2, 0u);
  EXPECT_EQ(F32FromBF16(static_cast<const uint16_t*>(g.data)[2]), -3.0f);
  EXPECT_EQ(ck.Find("model.norm.weight")->stats.min, -3.0f);
}

}  // namespace
}  // namespace glmnorm
