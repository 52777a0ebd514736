// `glmnorm inspect` and `glmnorm apply`, run as the user runs them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "array_file.h"
#include "cli_runner.h"
#include "fixtures.h"
#include "glmnorm/checkpoint.h"
#include "glmnorm/rms_norm.h"
#include "glmnorm/safetensors.h"

namespace glmnorm {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

const std::string kData = GLMNORM_TEST_DATA;

using test::CliRun;
using test::Glmnorm;
using test::Q;

TEST(Inspect, SoundCheckpointTable) {
  const CliRun r = Glmnorm("inspect " + Q(kData + "/tiny_glm45"));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, AllOf(HasSubstr("model        glm4_moe"), HasSubstr("head_dim     16"),
                           HasSubstr("layers       3 (+1 MTP)"), HasSubstr("eps          1e-05"),
                           HasSubstr("use_qk_norm  true"), HasSubstr("no problems found")));
  EXPECT_THAT(
      r.out,
      testing::ContainsRegex(
          "model\\.layers\\.3\\.shared_head\\.norm\\.weight +mtp_shared_head_norm +64 +BF16"));
  EXPECT_THAT(r.out, testing::ContainsRegex(
                         "model\\.layers\\.2\\.self_attn\\.k_norm\\.weight +k_norm +16 +BF16"));
  EXPECT_THAT(r.out, HasSubstr("20 norms in 10 mapped shard(s)"));
  EXPECT_THAT(r.err, IsEmpty());
}

TEST(Inspect, JsonHasTheDocumentedKeys) {
  const CliRun r = Glmnorm("inspect --json " + Q(kData + "/tiny_air"));
  EXPECT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  std::vector<std::string> keys;
  for (const auto& [k, v] : j.items()) keys.push_back(k);
  EXPECT_THAT(keys,
              testing::UnorderedElementsAre("format", "model_type", "hidden_size", "head_dim", "num_layers",
                                            "eps", "use_qk_norm", "norms", "problems"));
  EXPECT_EQ(j["model_type"], "glm4_moe");
  EXPECT_EQ(j["hidden_size"], 48);
  EXPECT_EQ(j["head_dim"], 16);
  EXPECT_EQ(j["num_layers"], 2);
  EXPECT_EQ(j["eps"], 1e-5);
  EXPECT_EQ(j["use_qk_norm"], false);
  ASSERT_EQ(j["norms"].size(), 10u);
  EXPECT_EQ(j["norms"][0], (nlohmann::json{{"name", "model.layers.0.input_layernorm.weight"},
                                           {"role", "input_layernorm"},
                                           {"width", 48},
                                           {"dtype", "BF16"}}));
  EXPECT_TRUE(j["problems"].empty());
}

TEST(Inspect, ProblemsExitOne) {
  test::TempDir dir;
  test::FakeCheckpoint fake;
  fake.config["rms_norm_eps"] = 1e-6;
  fake.tensors.erase("model.layers.0.self_attn.k_norm.weight");
  fake.Write(dir.path());
  const CliRun r = Glmnorm("inspect --json " + Q(dir.path()));
  EXPECT_EQ(r.status, 1);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["eps"], 1e-6);
  ASSERT_EQ(j["problems"].size(), 2u);
  EXPECT_THAT(j["problems"][0].get<std::string>(), HasSubstr("rms_norm_eps is 1e-06"));
  EXPECT_THAT(j["problems"][1].get<std::string>(),
              HasSubstr("missing norm model.layers.0.self_attn.k_norm.weight"));
  bool listed = false;
  for (const auto& n : j["norms"]) {
    if (n["name"] == "model.layers.0.self_attn.k_norm.weight") {
      listed = true;
      EXPECT_TRUE(n["dtype"].is_null());
      EXPECT_EQ(n["width"], 4);
    }
  }
  EXPECT_TRUE(listed);
  const CliRun text = Glmnorm("inspect " + Q(dir.path()));
  EXPECT_EQ(text.status, 1);
  EXPECT_THAT(text.out, AllOf(HasSubstr("MISSING"), HasSubstr("2 problem(s):")));
}

TEST(Inspect, UnreadableExitsTwoWithOneLine) {
  const CliRun r = Glmnorm("inspect /nonexistent/ckpt");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.out, IsEmpty());
  EXPECT_EQ(r.err,
            "glmnorm: /nonexistent/ckpt/config.json: cannot open: No such file or directory\n");

  test::TempDir dir;
  test::FakeCheckpoint fake;
  fake.Write(dir.path());
  test::WriteFile(dir / "model.safetensors.index.json", std::string("{\"weight_map\": "));
  const CliRun bad = Glmnorm("inspect --json " + Q(dir.path()));
  EXPECT_EQ(bad.status, 2);
  EXPECT_THAT(bad.err, AllOf(HasSubstr("model.safetensors.index.json: not valid JSON"),
                             testing::EndsWith("\n")));
  EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1);
}

// --- apply -----------------------------------------------------------------

class Apply : public ::testing::Test {
 protected:
  void SetUp() override {
    goldens_ = std::make_unique<SafetensorsFile>(
        SafetensorsFile::Open(kData + "/tiny_glm45/goldens.safetensors"));
  }
  // A golden tensor as a HostArray.
  checkpoint::HostArray Golden(const std::string& key) const {
    const SafetensorsTensor& t = *goldens_->Find(key);
    checkpoint::HostArray a;
    a.dtype = *DTypeFromSafetensors(t.dtype);
    a.shape = t.shape;
    const auto bytes = goldens_->Bytes(t);
    a.data.assign(bytes.begin(), bytes.end());
    return a;
  }
  void WriteArray(const std::string& path, const std::string& name,
                  const checkpoint::HostArray& a) const {
    test::WriteFile(path, checkpoint::EncodeArray(path, name, a));
  }
  std::string ApplyArgs(const std::string& norm, const std::string& in, const std::string& out) {
    return "apply " + Q(kData + "/tiny_glm45") + " --norm " + norm + " --input " + Q(in) +
           " --output " + Q(out);
  }

  test::TempDir dir_;
  std::unique_ptr<SafetensorsFile> goldens_;
};

TEST_F(Apply, ReproducesTransformersInEveryFormatPair) {
  const std::string norm = "model.layers.1.self_attn.q_norm.weight";  // rank-4 (1, 2, 6, 16)
  const checkpoint::HostArray x = Golden("x/" + norm);
  const checkpoint::HostArray want = Golden("y/" + norm);
  for (const char* in : {"x.npy", "x.safetensors"}) {
    WriteArray(dir_ / in, "x", x);
    for (const char* out : {"y.npy", "y.safetensors"}) {
      const CliRun r = Glmnorm(ApplyArgs(norm, dir_ / in, dir_ / out));
      ASSERT_EQ(r.status, 0) << r.err;
      const checkpoint::HostArray y = checkpoint::ReadArray(dir_ / out, "y");
      EXPECT_EQ(y.dtype, DType::kBF16);
      EXPECT_EQ(y.shape, want.shape);
      EXPECT_EQ(y.data, want.data) << in << " -> " << out;
    }
  }
  const SafetensorsFile meta = SafetensorsFile::Open(dir_ / "y.safetensors");
  EXPECT_EQ(meta.metadata().at("norm"), norm);
  EXPECT_EQ(meta.metadata().at("rounding"), "cast-then-scale");
}

TEST_F(Apply, F32InputGivesF32OutputAndSingleRoundingIsSelectable) {
  const std::string norm = "model.norm.weight";
  WriteArray(dir_ / "x.npy", "x", Golden("xf32/" + norm));
  CliRun r = Glmnorm(ApplyArgs(norm, dir_ / "x.npy", dir_ / "y.npy"));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(checkpoint::ReadArray(dir_ / "y.npy", "y").data, Golden("yf32/" + norm).data);

  const checkpoint::HostArray x = Golden("x/" + norm);
  WriteArray(dir_ / "x.npy", "x", x);
  r = Glmnorm(ApplyArgs(norm, dir_ / "x.npy", dir_ / "y.npy") + " --rounding single");
  ASSERT_EQ(r.status, 0) << r.err;
  const checkpoint::HostArray y = checkpoint::ReadArray(dir_ / "y.npy", "y");
  // The same computation in-process.
  const CheckpointNorms ck = CheckpointNorms::Open(kData + "/tiny_glm45");
  std::vector<std::byte> want(y.data.size());
  const int64_t rows = x.shape[0], width = x.shape[1];
  RmsNorm(Rows<const void*>(x.data.data(), x.dtype, rows, width, width), ck.Gamma(norm),
          Rows<void*>(want.data(), DType::kBF16, rows, width, width),
          ck.Options(Rounding::kSingle));
  EXPECT_EQ(y.data, want);
  EXPECT_NE(y.data, Golden("y/" + norm).data);

  r = Glmnorm(ApplyArgs(norm, dir_ / "x.npy", dir_ / "y.npy") + " --rounding fast");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("--rounding"));
}

TEST_F(Apply, FailureKeepsTheEarlierOutputAndLeavesNoTemporaryFile) {
  const std::string norm = "model.norm.weight";
  WriteArray(dir_ / "x.npy", "x", Golden("x/" + norm));
  ASSERT_EQ(Glmnorm(ApplyArgs(norm, dir_ / "x.npy", dir_ / "y.npy")).status, 0);
  const std::string earlier = test::ReadFile(dir_ / "y.npy");
  ASSERT_FALSE(earlier.empty());

  // A q_norm has width 16; this x has rows of 64.
  const CliRun r =
      Glmnorm(ApplyArgs("model.layers.0.self_attn.q_norm.weight", dir_ / "x.npy", dir_ / "y.npy"));
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err, "glmnorm: " + dir_ / "x.npy" +
                       ": x has shape [6, 64] but model.layers.0.self_attn.q_norm.weight "
                       "normalises rows of width 16\n");
  // Nothing is removed on failure: the path still holds the earlier result.
  EXPECT_EQ(test::ReadFile(dir_ / "y.npy"), earlier);
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir_.path())) {
    names.push_back(entry.path().filename().string());
  }
  EXPECT_THAT(names, testing::UnorderedElementsAre("x.npy", "y.npy"));
}

TEST_F(Apply, RefusesToWriteOverItsInput) {
  WriteArray(dir_ / "x.npy", "x", Golden("x/model.norm.weight"));
  const std::string before = test::ReadFile(dir_ / "x.npy");
  const CliRun r = Glmnorm(ApplyArgs("model.norm.weight", dir_ / "x.npy", dir_ / "x.npy"));
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("x.npy: is the input file; choose another --output"));
  EXPECT_EQ(test::ReadFile(dir_ / "x.npy"), before);
}

TEST_F(Apply, BadArgumentsGiveOneClearMessage) {
  WriteArray(dir_ / "x.npy", "x", Golden("x/model.norm.weight"));
  CliRun r = Glmnorm(ApplyArgs("model.norm", dir_ / "x.npy", dir_ / "y.npy"));
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("\"model.norm\" is not a norm of this glm4_moe model (norm names "
                               "end in .weight"));
  r = Glmnorm(ApplyArgs("model.norm.weight", dir_ / "x.npy", dir_ / "y.bin"));
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("y.bin: unknown file type; expected a .npy or .safetensors file"));
  r = Glmnorm(ApplyArgs("model.norm.weight", dir_ / "missing.npy", dir_ / "y.npy"));
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("missing.npy: cannot open: No such file"));
  WriteArray(dir_ / "x.safetensors", "z", Golden("x/model.norm.weight"));
  r = Glmnorm(ApplyArgs("model.norm.weight", dir_ / "x.safetensors", dir_ / "y.npy"));
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("no tensor \"x\" (it has: z)"));
  EXPECT_FALSE(test::Exists(dir_ / "y.npy"));
}

}  // namespace
}  // namespace glmnorm
