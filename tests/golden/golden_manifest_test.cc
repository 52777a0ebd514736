// Consistency of the golden data itself (tests/data/golden): every case loads,
// its files match its shapes, the eps is GLM's, the generator recorded its
// versions and seed, and the data stays small. Needs no kernel.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <iostream>
#include <set>
#include <string>

#include "glmnorm/rms_norm.h"
#include "support/golden_data.h"

namespace glmnorm::golden {
namespace {

constexpr uintmax_t kMaxGoldenBytes = 2 * 1024 * 1024;

TEST(GoldenManifestTest, RecordsProvenance) {
  const nlohmann::json& m = Manifest();
  EXPECT_EQ(m.at("format").get<int>(), 1);
  EXPECT_FALSE(m.at("torch_version").get<std::string>().empty());
  EXPECT_FALSE(m.at("transformers_version").get<std::string>().empty());
  EXPECT_TRUE(m.at("seed").is_number_integer());
  EXPECT_EQ(m.at("module").get<std::string>(),
            "transformers.models.glm4_moe.modeling_glm4_moe.Glm4MoeRMSNorm");
  std::cout << "[golden] torch " << m.at("torch_version").get<std::string>() << ", transformers "
            << m.at("transformers_version").get<std::string>() << ", seed " << m.at("seed") << "\n";
}

TEST(GoldenManifestTest, EveryCaseLoadsWithGlmEps) {
  const std::set<std::string> kinds = {"rms_norm", "add_rms_norm", "qk_norm"};
  std::set<std::string> names;
  int num_cases = 0;
  for (const auto& entry : Manifest().at("cases")) {
    const std::string name = entry.at("name");
    SCOPED_TRACE(name);
    EXPECT_TRUE(names.insert(name).second) << "duplicate case name";
    Case c;
    ASSERT_NO_THROW(c = LoadCase(name));
    EXPECT_TRUE(kinds.count(c.kind)) << c.kind;
    // The checkpoints' rms_norm_eps, i.e. the library's default.
    EXPECT_EQ(static_cast<float>(c.eps), kGlmRmsNormEps);
    EXPECT_FALSE(c.arrays.empty());
    ++num_cases;
  }
  // 7 rms_norm + 1 add_rms_norm + 1 qk_norm.
  EXPECT_EQ(num_cases, 9);
  EXPECT_EQ(CaseNames("rms_norm").size(), 7u);
  EXPECT_EQ(CaseNames("add_rms_norm").size(), 1u);
  EXPECT_EQ(CaseNames("qk_norm").size(), 1u);
}

TEST(GoldenManifestTest, DataIsSmall) {
  uintmax_t total = 0;
  for (const auto& f : std::filesystem::directory_iterator(GoldenDir())) {
    if (f.is_regular_file()) total += f.file_size();
  }
  std::cout << "[golden] data size " << total << " bytes\n";
  EXPECT_GT(total, 0u);
  EXPECT_LT(total, kMaxGoldenBytes);
}

TEST(GoldenManifestTest, UlpDistanceIsOrdered) {
  // The comparison the other golden tests rely on.
  EXPECT_EQ(UlpDistance(DType::kBF16, 0x3F80, 0x3F80), 0);
  EXPECT_EQ(UlpDistance(DType::kBF16, 0x3F80, 0x3F81), 1);
  EXPECT_EQ(UlpDistance(DType::kBF16, 0x3F80, 0x3F7F), 1);  // across a binade
  EXPECT_EQ(UlpDistance(DType::kBF16, 0x0000, 0x8000), 0);  // +0 and -0
  EXPECT_EQ(UlpDistance(DType::kBF16, 0x0001, 0x8001), 2);  // smallest subnormals
  EXPECT_EQ(UlpDistance(DType::kF32, 0x3F800000u, 0x3F800004u), 4);
  EXPECT_EQ(UlpDistance(DType::kF32, 0x7FC00000u, 0x3F800000u), INT64_MAX);  // NaN
  BitStats stats;
  for (int i = 0; i < 9999; ++i) stats.Add(i, 0);
  stats.Add(9999, 1);
  EXPECT_TRUE(stats.MeetsBf16Bar());  // exactly 99.99%
  stats.Add(10000, 1);
  EXPECT_FALSE(stats.MeetsBf16Bar());
}

}  // namespace
}  // namespace glmnorm::golden
