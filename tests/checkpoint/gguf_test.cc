// The GGUF reader, GGUF checkpoints through CheckpointNorms, and the inspect /
// diff / apply commands on them. The files are tests/data/tiny_glm45_gguf,
// made from tests/data/tiny_glm45 by scripts/make_tiny_gguf.py with
// llama.cpp's gguf package.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <set>
#include <sstream>
#include <nlohmann/json.hpp>

#include "array_file.h"
#include "cli_runner.h"
#include "fixtures.h"
#include "glmnorm/checkpoint.h"
#include "glmnorm/error.h"
#include "glmnorm/gguf.h"
#include "glmnorm/safetensors.h"

namespace glmnorm {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

const std::string kData = GLMNORM_TEST_DATA;
const std::string kGgufDir = kData + "/tiny_glm45_gguf";
const std::string kGguf = kGgufDir + "/tiny_glm45.gguf";
const std::string kSplit = kGgufDir + "/split/tiny_glm45-00001-of-00003.gguf";
const std::string kBroken = kGgufDir + "/broken/";

using test::CliRun;
using test::Glmnorm;
using test::Q;

std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(GgufReader, ReadsTheConvertedCheckpoint) {
  const GgufFile f = GgufFile::Open(kGguf);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.data_offset() % 32, 0u);
  const GgufValue* arch = f.FindKey("general.architecture");
  ASSERT_NE(arch, nullptr);
  EXPECT_EQ(arch->string, "glm4moe");
  const GgufValue* eps = f.FindKey("glm4moe.attention.layer_norm_rms_epsilon");
  ASSERT_NE(eps, nullptr);
  EXPECT_EQ(eps->type, GgufValueType::kFloat32);
  EXPECT_EQ(*eps->AsFloat(), static_cast<double>(1e-5f));
  const GgufTensor* norm = f.Find("blk.0.attn_norm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->type, kGgmlF32);
  EXPECT_EQ(norm->dims, std::vector<int64_t>{64});
  EXPECT_EQ(norm->size, 64u * 4);
  // Zero-copy: the view is the mapped bytes.
  const ConstTensorView v = f.View(*norm);
  EXPECT_EQ(v.data, f.Bytes(*norm).data());
  EXPECT_EQ(v.width(), 64);
  // Quantised weights are read as byte ranges only.
  const GgufTensor* embd = f.Find("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(GgmlType(embd->type)->name, "Q8_0");
  EXPECT_EQ(embd->shape(), (std::vector<int64_t>{128, 64}));
  EXPECT_EQ(embd->size, 128u * 2 * 34);
  EXPECT_THAT(ErrorOf([&] { f.View(*embd); }), HasSubstr("has type Q8_0; expected F32"));
}

TEST(GgufReader, NormNamesMapBothWays) {
  const std::pair<const char*, const char*> pairs[] = {
      {"model.layers.0.input_layernorm.weight", "blk.0.attn_norm.weight"},
      {"model.layers.12.post_attention_layernorm.weight", "blk.12.post_attention_norm.weight"},
      {"model.layers.3.self_attn.q_norm.weight", "blk.3.attn_q_norm.weight"},
      {"model.layers.3.self_attn.k_norm.weight", "blk.3.attn_k_norm.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"model.layers.92.enorm.weight", "blk.92.nextn.enorm.weight"},
      {"model.layers.92.hnorm.weight", "blk.92.nextn.hnorm.weight"},
      {"model.layers.92.shared_head.norm.weight", "blk.92.nextn.shared_head_norm.weight"},
  };
  for (const auto& [hf, gg] : pairs) {
    EXPECT_EQ(GgufNormName(hf), gg);
    EXPECT_EQ(TransformersNormName(gg), hf);
  }
  for (const char* not_norm : {"blk.0.attn_q.weight", "model.layers.0.mlp.gate.weight",
                               "blk.x.attn_norm.weight", "blk.01.attn_norm.weight",
                               "blk.-1.attn_norm.weight", "output.weight", ""}) {
    EXPECT_EQ(TransformersNormName(not_norm), std::nullopt) << not_norm;
    EXPECT_EQ(GgufNormName(not_norm), std::nullopt) << not_norm;
  }
}

TEST(GgufReader, MalformedFilesThrowOneLineNamingTheFile) {
  const std::pair<const char*, const char*> cases[] = {
      {"truncated.gguf", "extends past the end of the file"},
      {"bad_magic.gguf", "bad magic"},
      {"tensor_count_2p62.gguf", "claims 4611686018427387904 tensors"},
      {"kv_count_huge.gguf", "claims 1099511627776 metadata entries"},
      {"string_2p40.gguf", "claims 1099511627776 bytes"},
      {"offset_past_end.gguf", "ggml packs tensors in order"},
      {"dims_past_end.gguf", "extends past the end of the file"},
  };
  for (const auto& [file, why] : cases) {
    const std::string path = kBroken + file;
    const std::string e = ErrorOf([&] { GgufFile::Open(path); });
    EXPECT_THAT(e, AllOf(StartsWith(path + ": "), HasSubstr(why))) << file;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
  // A tensor past the end is refused even though every norm is in the file.
  const GgufFile good = GgufFile::Open(kBroken + "norms_only.gguf");
  EXPECT_EQ(good.tensors().back().name, "token_embd.weight");
}

TEST(GgufReader, InMemoryImagesAreCheckedBeforeUse) {
  // Magic, version 3, 0 tensors, 1 kv whose key claims 2^40 bytes.
  std::vector<std::byte> image(24 + 8);
  std::memcpy(image.data(), "GGUF", 4);
  const uint32_t version = 3;
  std::memcpy(image.data() + 4, &version, 4);
  const uint64_t one = 1, huge = uint64_t{1} << 40;
  std::memcpy(image.data() + 16, &one, 8);
  EXPECT_THAT(ErrorOf([&] { GgufFile::Parse(image, "img"); }),
              HasSubstr("img: header claims 1 metadata entries, but the file has room for at most 0"));
  image.resize(24 + 13);
  std::memcpy(image.data() + 24, &huge, 8);
  EXPECT_THAT(ErrorOf([&] { GgufFile::Parse(image, "img"); }),
              HasSubstr("claims 1099511627776 bytes, but only 5 remain"));
  const uint32_t v1 = 1;
  std::memcpy(image.data() + 4, &v1, 4);
  EXPECT_THAT(ErrorOf([&] { GgufFile::Parse(image, "img"); }),
              HasSubstr("GGUF version 1 is not supported"));
}

TEST(GgufCheckpoint, NormsEqualTheSafetensorsOnesWidenedToF32) {
  const CheckpointNorms st = CheckpointNorms::Open(kData + "/tiny_glm45");
  const CheckpointNorms gg = CheckpointNorms::Open(kGguf);
  EXPECT_EQ(gg.format(), "gguf");
  EXPECT_TRUE(gg.sound()) << gg.problems().front();
  EXPECT_EQ(gg.model_name(), st.model_name());
  EXPECT_EQ(gg.config().hidden_size, st.config().hidden_size);
  EXPECT_EQ(gg.config().num_hidden_layers, st.config().num_hidden_layers);
  EXPECT_EQ(gg.config().num_nextn_predict_layers, 1);
  EXPECT_EQ(gg.config().head_dim, st.config().head_dim);
  EXPECT_TRUE(gg.config().use_qk_norm);
  EXPECT_EQ(gg.eps(), st.eps());
  ASSERT_EQ(gg.norms().size(), st.norms().size());
  for (size_t i = 0; i < st.norms().size(); ++i) {
    const NormTensor& a = st.norms()[i];
    const NormTensor& b = gg.norms()[i];
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(b.dtype, "F32");
    EXPECT_EQ(b.stored_name, *GgufNormName(a.name));
    ASSERT_TRUE(b.usable());
    ASSERT_EQ(a.gamma.width(), b.gamma.width());
    const auto* bf = static_cast<const uint16_t*>(a.gamma.data);
    const auto* f = static_cast<const float*>(b.gamma.data);
    for (int64_t k = 0; k < a.gamma.width(); ++k) EXPECT_EQ(F32FromBF16(bf[k]), f[k]) << a.name;
  }
  // GGUF names find the same norm.
  EXPECT_EQ(gg.Gamma("blk.1.attn_q_norm.weight").data,
            gg.Gamma("model.layers.1.self_attn.q_norm.weight").data);
}

TEST(GgufCheckpoint, SplitSetReadsAsOne) {
  const CheckpointNorms one = CheckpointNorms::Open(kGguf);
  const CheckpointNorms split = CheckpointNorms::Open(kSplit);
  EXPECT_TRUE(split.sound());
  EXPECT_EQ(split.mapped_shards().size(), 3u);
  std::set<std::string> files;
  for (const NormTensor& n : split.norms()) {
    files.insert(n.shard);
    const NormTensor* m = one.Find(n.name);
    ASSERT_TRUE(m && m->usable() && n.usable());
    EXPECT_EQ(std::memcmp(m->gamma.data, n.gamma.data, n.stored_bytes.size()), 0) << n.name;
  }
  EXPECT_GE(files.size(), 2u);  // the norms really are spread over the parts
  const std::string part2 = kGgufDir + "/split/tiny_glm45-00002-of-00003.gguf";
  EXPECT_THAT(ErrorOf([&] { CheckpointNorms::Open(part2); }),
              AllOf(StartsWith(part2 + ": is part 2 of a split set of 3 files"),
                    HasSubstr("give the first file")));
  // A missing part.
  test::TempDir dir;
  for (int k : {1, 2}) {
    const std::string name = "tiny_glm45-0000" + std::to_string(k) + "-of-00003.gguf";
    std::filesystem::copy_file(kGgufDir + "/split/" + name, dir / name);
  }
  EXPECT_THAT(ErrorOf([&] { CheckpointNorms::Open(dir / "tiny_glm45-00001-of-00003.gguf"); }),
              HasSubstr("tiny_glm45-00003-of-00003.gguf: cannot open"));
}

TEST(GgufCheckpoint, DirectoriesAreNotGuessed) {
  test::TempDir dir;
  std::filesystem::copy(kData + "/tiny_glm45", dir.path());
  std::filesystem::copy_file(kGguf, dir / "tiny_glm45.gguf");
  EXPECT_THAT(ErrorOf([&] { CheckpointNorms::Open(dir.path()); }),
              HasSubstr("holds both a safetensors checkpoint (config.json, shards) and 1 GGUF"));
  // Only GGUF, one checkpoint: read it.
  EXPECT_TRUE(CheckpointNorms::Open(kGgufDir + "/split").sound());
  // A file that is not .gguf.
  EXPECT_THAT(ErrorOf([&] { CheckpointNorms::Open(kData + "/tiny_glm45/config.json"); }),
              HasSubstr("config.json: is a regular file, expected a checkpoint directory"));
}

TEST(GgufCheckpoint, AirHasNoQkNorms) {
  const CheckpointNorms air = CheckpointNorms::Open(kGgufDir + "/air.gguf");
  EXPECT_TRUE(air.sound()) << air.problems().front();
  EXPECT_FALSE(air.config().use_qk_norm);
  EXPECT_EQ(air.model_name(), CheckpointNorms::Open(kData + "/tiny_air").model_name());
}

TEST(GgufCheckpoint, F16AndBF16NormsAreRead) {
  const CheckpointNorms st = CheckpointNorms::Open(kData + "/tiny_glm45");
  for (const auto& [file, dtype] : {std::pair{"bf16_norms.gguf", DType::kBF16},
                                    std::pair{"f16_norms.gguf", DType::kF16}}) {
    const CheckpointNorms gg = CheckpointNorms::Open(kGgufDir + "/dtypes/" + file);
    EXPECT_TRUE(gg.sound()) << file;
    for (const NormTensor& a : st.norms()) {
      const NormTensor* b = gg.Find(a.name);
      ASSERT_TRUE(b != nullptr && b->usable()) << a.name;
      EXPECT_EQ(b->dtype, dtype == DType::kBF16 ? "BF16" : "F16");
      ASSERT_EQ(b->gamma.dtype, dtype);
      const auto* x = static_cast<const uint16_t*>(a.gamma.data);
      const auto* y = static_cast<const uint16_t*>(b->gamma.data);
      for (int64_t k = 0; k < a.gamma.width(); ++k) {
        // The tiny gammas are exact in F16 too.
        EXPECT_EQ(F32FromBF16(x[k]), dtype == DType::kBF16 ? F32FromBF16(y[k]) : F32FromF16(y[k]));
      }
    }
  }
  // Two GGUF checkpoints in one directory: not guessed.
  EXPECT_THAT(ErrorOf([&] { CheckpointNorms::Open(kGgufDir + "/dtypes"); }),
              HasSubstr("holds 2 GGUF checkpoints; give the .gguf file to read"));
}

// ---- The commands -----------------------------------------------------------

struct Broken {
  const char* file;
  int status;  // inspect's exit status
  const char* text;  // on stdout (status 1) or stderr (status 2)
};

TEST(GgufCli, InspectReportsEveryBrokenVariant) {
  const Broken cases[] = {
      {"norms_only.gguf", 0, "no problems found"},
      {"one_ulp.gguf", 0, "no problems found"},
      {"eps_1e-6.gguf", 1, "glm4moe.attention.layer_norm_rms_epsilon is 1e-06"},
      {"eps_missing.gguf", 1, "glm4moe.attention.layer_norm_rms_epsilon is missing"},
      {"q_norm_hidden_width.gguf", 1,
       "model.layers.1.self_attn.q_norm.weight (blk.1.attn_q_norm.weight): width 64 is "
       "hidden_size"},
      {"missing_norm.gguf", 1,
       "missing norm model.layers.0.self_attn.k_norm.weight (blk.0.attn_k_norm.weight; k_norm, "
       "expected [16])"},
      {"nan_gain.gguf", 1, "model.norm.weight (output_norm.weight): gamma has 1 NaN"},
      {"truncated.gguf", 2, "tensor \"token_embd.weight\""},
      {"bad_magic.gguf", 2, "not a GGUF file: bad magic"},
      {"tensor_count_2p62.gguf", 2, "claims 4611686018427387904 tensors"},
      {"kv_count_huge.gguf", 2, "metadata entries"},
      {"string_2p40.gguf", 2, "claims 1099511627776 bytes"},
      {"offset_past_end.gguf", 2, "has offset"},
      {"dims_past_end.gguf", 2, "extends past the end"},
  };
  for (const Broken& c : cases) {
    const std::string path = kBroken + c.file;
    const CliRun r = Glmnorm("inspect " + Q(path));
    EXPECT_EQ(r.status, c.status) << c.file << "\n" << r.out << r.err;
    if (c.status == 2) {
      EXPECT_THAT(r.err, AllOf(StartsWith("glmnorm: " + path + ": "), HasSubstr(c.text)))
          << c.file;
      EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
      EXPECT_THAT(r.out, IsEmpty());
    } else {
      EXPECT_THAT(r.out, HasSubstr(c.text)) << c.file;
      EXPECT_THAT(r.err, IsEmpty());
    }
  }
}

TEST(GgufCli, InspectShowsTheSameNormsAsTheSafetensorsCheckpoint) {
  const CliRun r = Glmnorm("inspect " + Q(kSplit));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, AllOf(HasSubstr("format       GGUF, 3 file(s)"), HasSubstr("eps          1e-05"),
                           HasSubstr("head_dim     16"), HasSubstr("20 norms in 3 mapped shard(s)")));
  EXPECT_THAT(r.out, testing::ContainsRegex(
                         "model\\.layers\\.2\\.self_attn\\.k_norm\\.weight +k_norm +16 +F32"));
  const CliRun j = Glmnorm("inspect --json " + Q(kGguf));
  EXPECT_EQ(j.status, 0);
  const nlohmann::json out = nlohmann::json::parse(j.out);
  EXPECT_EQ(out["format"], "gguf");
  EXPECT_EQ(out["norms"][0]["gguf_name"], "blk.0.attn_norm.weight");
  EXPECT_EQ(out["eps"].get<double>(), static_cast<double>(1e-5f));
}

TEST(GgufCli, DiffFindsAFaithfulConversionIdentical) {
  for (const std::string& b : {kGguf, kSplit, kBroken + "norms_only.gguf"}) {
    const CliRun r = Glmnorm("diff " + Q(kData + "/tiny_glm45") + " " + Q(b));
    EXPECT_EQ(r.status, 0) << b << "\n" << r.out << r.err;
    EXPECT_EQ(r.out, "identical: 20 norms bit for bit (as float32), eps 1e-05\n");
  }
  const CliRun self = Glmnorm("diff " + Q(kData + "/tiny_air") + " " + Q(kData + "/tiny_air"));
  EXPECT_EQ(self.status, 0) << self.out;
}

TEST(GgufCli, DiffPrintsOneLinePerDifference) {
  struct Case {
    const char* file;
    std::vector<std::string> lines;
  };
  const Case cases[] = {
      {"eps_1e-6.gguf", {"eps: 1e-05 in A, 1e-06 in B (compared as float32)"}},
      {"eps_missing.gguf", {"eps: 1e-05 in A, missing in B (compared as float32)"}},
      {"one_ulp.gguf",
       {"model.layers.2.post_attention_layernorm.weight: 1 of 64 elements differ; largest "
        "difference "}},
      {"missing_norm.gguf", {"model.layers.0.self_attn.k_norm.weight: missing in B"}},
      {"q_norm_hidden_width.gguf",
       {"model.layers.1.self_attn.q_norm.weight: shape [16] in A, [64] in B "
        "(blk.1.attn_q_norm.weight)"}},
      {"nan_gain.gguf", {"model.norm.weight: 1 of 64 elements differ; largest difference NaN"}},
  };
  for (const Case& c : cases) {
    const CliRun r = Glmnorm("diff " + Q(kData + "/tiny_glm45") + " " + Q(kBroken + c.file));
    EXPECT_EQ(r.status, 1) << c.file << r.err;
    std::vector<std::string> got;
    std::stringstream ss(r.out);
    for (std::string line; std::getline(ss, line);) got.push_back(line);
    ASSERT_EQ(got.size(), c.lines.size()) << c.file << "\n" << r.out;
    for (size_t i = 0; i < got.size(); ++i) EXPECT_THAT(got[i], StartsWith(c.lines[i])) << c.file;
  }
  // The 1-ulp change, in JSON.
  const CliRun j = Glmnorm("diff --json " + Q(kGguf) + " " + Q(kBroken + "one_ulp.gguf"));
  EXPECT_EQ(j.status, 1);
  const nlohmann::json out = nlohmann::json::parse(j.out);
  EXPECT_FALSE(out["identical"].get<bool>());
  ASSERT_EQ(out["differences"].size(), 1u);
  EXPECT_EQ(out["differences"][0]["kind"], "values");
  EXPECT_EQ(out["differences"][0]["differing"], 1);
  EXPECT_EQ(out["differences"][0]["largest_index"], 5);
  const float a = out["differences"][0]["a"].get<float>();
  EXPECT_EQ(out["differences"][0]["b"].get<float>(), std::nextafter(a, INFINITY));
  // Different models: missing norms and shapes, exit 1.
  const CliRun models = Glmnorm("diff " + Q(kData + "/tiny_glm45") + " " + Q(kData + "/tiny_air"));
  EXPECT_EQ(models.status, 1);
  EXPECT_THAT(models.out, HasSubstr("model.layers.0.self_attn.q_norm.weight: missing in B"));
}

TEST(GgufCli, DiffOfAnUnreadableCheckpointExitsTwo) {
  for (const std::string& bad : {kBroken + "truncated.gguf", kBroken + "nonexistent.gguf"}) {
    const CliRun r = Glmnorm("diff " + Q(kGguf) + " " + Q(bad));
    EXPECT_EQ(r.status, 2);
    EXPECT_THAT(r.err, StartsWith("glmnorm: " + bad + ": "));
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_THAT(r.out, IsEmpty());
  }
  const CliRun usage = Glmnorm("diff " + Q(kGguf));
  EXPECT_EQ(usage.status, 2);
}

TEST(GgufCli, ApplyGivesTheSafetensorsBits) {
  test::TempDir dir;
  const SafetensorsFile goldens = SafetensorsFile::Open(kData + "/tiny_glm45/goldens.safetensors");
  for (const std::string hf : {"model.layers.1.self_attn.q_norm.weight", "model.norm.weight"}) {
    const SafetensorsTensor& t = *goldens.Find("x/" + hf);
    checkpoint::HostArray x;
    x.dtype = *DTypeFromSafetensors(t.dtype);
    x.shape = t.shape;
    const auto bytes = goldens.Bytes(t);
    x.data.assign(bytes.begin(), bytes.end());
    test::WriteFile(dir / "x.npy", checkpoint::EncodeArray(dir / "x.npy", "x", x));
    const std::string gg = *GgufNormName(hf);
    const CliRun a = Glmnorm("apply " + Q(kData + "/tiny_glm45") + " --norm " + hf + " --input " +
                             Q(dir / "x.npy") + " --output " + Q(dir / "st.npy"));
    ASSERT_EQ(a.status, 0) << a.err;
    for (const std::string& name : {hf, gg}) {
      const CliRun b = Glmnorm("apply " + Q(kSplit) + " --norm " + name + " --input " +
                               Q(dir / "x.npy") + " --output " + Q(dir / "gg.npy"));
      ASSERT_EQ(b.status, 0) << b.err;
      const checkpoint::HostArray ys = checkpoint::ReadArray(dir / "st.npy", "y");
      const checkpoint::HostArray yg = checkpoint::ReadArray(dir / "gg.npy", "y");
      // The F32 gamma (exactly BF16) is applied as BF16: same dtype, same bits.
      EXPECT_EQ(yg.dtype, ys.dtype) << name;
      EXPECT_EQ(yg.data, ys.data) << name;
    }
  }
}

}  // namespace
}  // namespace glmnorm
