// Consistency of the golden data itself (tests/data/golden, one safetensors
// file per case): the directory holds case files only, every case loads, has
// exactly the arrays its kind needs with consistent dtypes and shapes, the eps
// is GLM's, the generator recorded its versions and seed (the same in every
// file), and the data stays small. Needs no kernel.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "glmnorm/rms_norm.h"
#include "glmnorm/safetensors.h"
#include "reference/oracle.h"
#include "support/golden_data.h"
#include "support/test_support.h"

namespace glmnorm::golden {
namespace {

constexpr uintmax_t kMaxGoldenBytes = 2 * 1024 * 1024;

// The generator's record, identical in every case file.
const char* const kProvenanceKeys[] = {"format",        "generator",      "description",
                                       "seed",          "torch_version",  "transformers_version",
                                       "numpy_version", "python_version", "machine",
                                       "module"};

using Shape = std::vector<int64_t>;

int64_t MetaInt(const Case& c, const char* key) {
  const nlohmann::json& v = c.meta.at(key);
  if (!v.is_number_integer() || v.get<int64_t>() <= 0) {
    throw std::runtime_error(c.name + ": metadata " + key + " is not a positive integer");
  }
  return v.get<int64_t>();
}

// Expects the case's arrays to be exactly `want` (name -> dtype, shape).
void ExpectArrays(const Case& c, const std::map<std::string, std::pair<DType, Shape>>& want) {
  std::set<std::string> have, wanted;
  for (const auto& [name, a] : c.arrays) have.insert(name);
  for (const auto& [name, spec] : want) wanted.insert(name);
  EXPECT_EQ(have, wanted) << "array names";
  for (const auto& [name, spec] : want) {
    if (!c.Has(name)) continue;
    const Array& a = c.Get(name);
    EXPECT_EQ(a.dtype, spec.first) << name;
    EXPECT_EQ(a.shape, spec.second) << name;
    EXPECT_EQ(a.bytes.size(), static_cast<size_t>(a.NumElements()) * SizeOf(a.dtype)) << name;
  }
}

void CheckRmsNormCase(const Case& c) {
  const int64_t rows = MetaInt(c, "rows");
  const int64_t width = MetaInt(c, "width");
  ASSERT_TRUE(c.Has("x") && c.Has("gamma"));
  const DType x = c.Get("x").dtype;
  const DType gamma = c.Get("gamma").dtype;
  std::map<std::string, std::pair<DType, Shape>> want = {
      {"x", {x, {rows, width}}},
      {"gamma", {gamma, {width}}},
      {"y", {Promote(gamma, x), {rows, width}}},  // PyTorch's promotion
  };
  // With mixed dtypes, the bf16 intermediate T(x * r) the f32 gain multiplies.
  if (x != gamma) want["h"] = {x, {rows, width}};
  ExpectArrays(c, want);
}

void CheckAddRmsNormCase(const Case& c) {
  const int64_t rows = MetaInt(c, "rows");
  const int64_t width = MetaInt(c, "width");
  const Shape act = {rows, width};
  ExpectArrays(c, {{"residual", {DType::kBF16, act}},
                   {"delta", {DType::kBF16, act}},
                   {"gamma", {DType::kBF16, {width}}},
                   {"h", {DType::kBF16, act}},
                   {"y", {DType::kBF16, act}}});
}

void CheckQkNormCase(const Case& c) {
  const int64_t batch = MetaInt(c, "batch");
  const int64_t seq = MetaInt(c, "seq");
  const int64_t tokens = MetaInt(c, "tokens");
  EXPECT_EQ(tokens, batch * seq);
  const nlohmann::json& heads = c.meta.at("heads");
  ASSERT_TRUE(heads.is_object());
  const int64_t num_q = heads.at("num_q_heads");
  const int64_t num_k = heads.at("num_k_heads");
  const int64_t num_v = heads.at("num_v_heads");
  const int64_t head_dim = heads.at("head_dim");
  ExpectArrays(c, {{"qkv", {DType::kBF16, {tokens, (num_q + num_k + num_v) * head_dim}}},
                   {"q_gamma", {DType::kBF16, {head_dim}}},
                   {"k_gamma", {DType::kBF16, {head_dim}}},
                   {"q_out", {DType::kBF16, {batch, seq, num_q, head_dim}}},
                   {"k_out", {DType::kBF16, {batch, seq, num_k, head_dim}}}});
}

void CheckRmsNormBackwardCase(const Case& c) {
  const int64_t rows = MetaInt(c, "rows");
  const int64_t width = MetaInt(c, "width");
  ASSERT_TRUE(c.Has("x") && c.Has("gamma"));
  const DType x = c.Get("x").dtype;
  const DType gamma = c.Get("gamma").dtype;
  ExpectArrays(c, {{"x", {x, {rows, width}}},
                   {"gamma", {gamma, {width}}},
                   {"dy", {Promote(gamma, x), {rows, width}}},
                   {"dx", {x, {rows, width}}},              // x.grad
                   {"dgamma", {gamma, {width}}}});          // weight.grad
}

void CheckAddRmsNormBackwardCase(const Case& c) {
  const int64_t rows = MetaInt(c, "rows");
  const int64_t width = MetaInt(c, "width");
  const Shape act = {rows, width};
  ExpectArrays(c, {{"h", {DType::kBF16, act}},
                   {"gamma", {DType::kBF16, {width}}},
                   {"dy", {DType::kBF16, act}},
                   {"d_residual_out", {DType::kBF16, act}},
                   {"d_h", {DType::kBF16, act}},
                   {"dgamma", {DType::kBF16, {width}}}});
}

bool IsBackward(const std::string& kind) {
  return kind.size() > 9 && kind.compare(kind.size() - 9, 9, "_backward") == 0;
}

TEST(GoldenFilesTest, DirectoryHoldsOnlyCaseFiles) {
  int files = 0;
  for (const auto& f : std::filesystem::directory_iterator(GoldenDir())) {
    EXPECT_TRUE(f.is_regular_file() && f.path().extension() == ".safetensors")
        << f.path() << " is not a case file";
    ++files;
  }
  EXPECT_EQ(files, static_cast<int>(AllCaseNames().size()));
}

TEST(GoldenFilesTest, RecordsProvenance) {
  const std::vector<std::string> names = AllCaseNames();
  ASSERT_FALSE(names.empty());
  // The forward cases and the backward cases (make_golden.py --backward-only
  // rewrites only those) each come from one run of the generator.
  std::map<bool, nlohmann::json> first;
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    const nlohmann::json m = LoadCase(name).meta;
    const bool backward = IsBackward(m.at("kind").get<std::string>());
    if (!first.count(backward)) first[backward] = m;
    EXPECT_EQ(m.at("format"), 2);
    EXPECT_EQ(m.at("generator"), "scripts/make_golden.py");
    EXPECT_FALSE(m.at("torch_version").get<std::string>().empty());
    EXPECT_FALSE(m.at("transformers_version").get<std::string>().empty());
    EXPECT_TRUE(m.at("seed").is_number_integer());
    EXPECT_EQ(m.at("module").get<std::string>(),
              "transformers.models.glm4_moe.modeling_glm4_moe.Glm4MoeRMSNorm");
    for (const char* key : kProvenanceKeys) {
      EXPECT_EQ(m.at(key), first[backward].at(key)) << key << " differs between case files";
    }
  }
  for (const auto& [backward, m] : first) {
    std::cout << "[golden] " << (backward ? "backward" : "forward") << " cases: torch "
              << m.at("torch_version").get<std::string>() << ", transformers "
              << m.at("transformers_version").get<std::string>() << ", python "
              << m.at("python_version").get<std::string>() << ", seed " << m.at("seed") << "\n";
  }
}

TEST(GoldenFilesTest, EveryCaseHasTheArraysOfItsKind) {
  int num_cases = 0;
  for (const std::string& name : AllCaseNames()) {
    SCOPED_TRACE(name);
    Case c;
    ASSERT_NO_THROW(c = LoadCase(name));
    // The checkpoints' rms_norm_eps, i.e. the library's default.
    EXPECT_EQ(static_cast<float>(c.eps), kGlmRmsNormEps);
    if (c.kind == "rms_norm") {
      CheckRmsNormCase(c);
    } else if (c.kind == "add_rms_norm") {
      CheckAddRmsNormCase(c);
    } else if (c.kind == "qk_norm") {
      CheckQkNormCase(c);
    } else if (c.kind == "rms_norm_backward") {
      CheckRmsNormBackwardCase(c);
    } else if (c.kind == "add_rms_norm_backward") {
      CheckAddRmsNormBackwardCase(c);
    } else {
      ADD_FAILURE() << "unknown kind " << c.kind;
    }
    ++num_cases;
  }
  // 7 rms_norm + 1 add_rms_norm + 1 qk_norm + 3 rms_norm_backward +
  // 1 add_rms_norm_backward.
  EXPECT_EQ(num_cases, 13);
  EXPECT_EQ(CaseNames("rms_norm_backward").size(), 3u);
  EXPECT_EQ(CaseNames("add_rms_norm_backward").size(), 1u);
  EXPECT_EQ(CaseNames("rms_norm").size(), 7u);
  EXPECT_EQ(CaseNames("add_rms_norm").size(), 1u);
  EXPECT_EQ(CaseNames("qk_norm").size(), 1u);
}

TEST(GoldenFilesTest, MetadataDecoding) {
  // String fields stay strings; the others are JSON-encoded.
  const nlohmann::json m = DecodeMetadata({{"kind", "rms_norm"},
                                           {"eps", "1e-05"},
                                           {"rows", "128"},
                                           {"torch_version", "2.15.0+cu132"},
                                           {"python_version", "3.11.2"},
                                           {"heads", R"({"head_dim": 128})"}});
  EXPECT_EQ(m.at("kind"), "rms_norm");
  EXPECT_EQ(m.at("eps").get<double>(), 1e-5);
  EXPECT_EQ(m.at("rows"), 128);
  EXPECT_EQ(m.at("torch_version"), "2.15.0+cu132");
  EXPECT_EQ(m.at("python_version"), "3.11.2");
  EXPECT_EQ(m.at("heads").at("head_dim"), 128);
}

TEST(GoldenFilesTest, DataIsSmall) {
  uintmax_t total = 0;
  for (const auto& f : std::filesystem::directory_iterator(GoldenDir())) {
    if (f.is_regular_file()) total += f.file_size();
  }
  std::cout << "[golden] data size " << total << " bytes\n";
  EXPECT_GT(total, 0u);
  EXPECT_LT(total, kMaxGoldenBytes);
}

TEST(GoldenFilesTest, UlpDistanceIsOrdered) {
  // The comparison the other golden tests rely on.
  EXPECT_EQ(test::UlpDistance(DType::kBF16, 0x3F80, 0x3F80), 0);
  EXPECT_EQ(test::UlpDistance(DType::kBF16, 0x3F80, 0x3F81), 1);
  EXPECT_EQ(test::UlpDistance(DType::kBF16, 0x3F80, 0x3F7F), 1);  // across a binade
  EXPECT_EQ(test::UlpDistance(DType::kBF16, 0x0000, 0x8000), 0);  // +0 and -0
  EXPECT_EQ(test::UlpDistance(DType::kBF16, 0x0001, 0x8001), 2);  // smallest subnormals
  EXPECT_EQ(test::UlpDistance(DType::kF32, 0x3F800000u, 0x3F800004u), 4);
  EXPECT_EQ(test::UlpDistance(DType::kF32, 0x7FC00000u, 0x3F800000u),
            reference::kNaNUlpDistance);  // NaN
  test::UlpStats stats;
  for (int i = 0; i < 9999; ++i) stats.Add(i, 0);
  stats.Add(9999, 1);
  EXPECT_TRUE(stats.MeetsBf16Bar());  // exactly 99.99%
  stats.Add(10000, 1);
  EXPECT_FALSE(stats.MeetsBf16Bar());
}

}  // namespace
}  // namespace glmnorm::golden
