// The cache of large output blocks (glmnorm/output_cache.h): reuse by size
// class, alignment, the setting's rule, concurrent use.
#include "glmnorm/output_cache.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "glmnorm/error.h"

namespace glmnorm {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

bool CacheOn() { return OutputCacheLimitFrom(std::getenv("GLMNORM_TORCH_OUTPUT_CACHE_MB")) > 0; }

TEST(OutputCache, ReleasedBlockServesTheNextRequestOfItsSizeClass) {
  if (!CacheOn()) GTEST_SKIP() << "GLMNORM_TORCH_OUTPUT_CACHE_MB=0";
  const OutputBlock a = AcquireOutputBlock(40 * kMiB);
  ASSERT_NE(a.data, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data) % 4096, 2048u);  // away from x mod 4 KiB
  std::memset(a.data, 0x5a, 40 * kMiB);  // the whole block is writable
  const OutputBlock other = AcquireOutputBlock(40 * kMiB);  // a is in use: a new block
  EXPECT_NE(other.data, a.data);
  ReleaseOutputBlock(a.owner);
  // 40 MiB + 1 byte rounds up to the same whole 2 MiB pages (the header fits).
  const OutputBlock again = AcquireOutputBlock(40 * kMiB + 1);
  EXPECT_EQ(again.data, a.data);
  EXPECT_EQ(static_cast<unsigned char*>(again.data)[40 * kMiB - 1], 0x5a);  // not re-zeroed
  // Another size class does not take a cached block.
  ReleaseOutputBlock(again.owner);
  const OutputBlock larger = AcquireOutputBlock(48 * kMiB);
  EXPECT_NE(larger.data, a.data);
  ReleaseOutputBlock(larger.owner);
  ReleaseOutputBlock(other.owner);
  ReleaseOutputBlock(nullptr);  // harmless
}

// MiB, 0 turns the cache off; the text's rule is the spin setting's
// (Settings.WholeNumberSettingTakesDigitsOnly in threading_test.cc).
TEST(OutputCache, SettingIsCheckedAndNamed) {
  EXPECT_EQ(OutputCacheLimitFrom(nullptr), 512 * kMiB);
  EXPECT_EQ(OutputCacheLimitFrom("0"), 0u);
  EXPECT_EQ(OutputCacheLimitFrom("64"), 64 * kMiB);
  EXPECT_EQ(OutputCacheLimitFrom("1048576"), size_t{1} << 40);
  try {
    OutputCacheLimitFrom("64MB");
    ADD_FAILURE() << "64MB was accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "GLMNORM_TORCH_OUTPUT_CACHE_MB must be a whole number of MiB from 0 "
                           "to 1048576, got '64MB'");
  }
}

TEST(OutputCache, ConcurrentCallersGetDistinctWholeBlocks) {
  std::vector<std::thread> threads;
  std::vector<int> bad(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        const size_t bytes = (4 + (i + t) % 3 * 2) * kMiB;
        const OutputBlock b = AcquireOutputBlock(bytes);
        auto* p = static_cast<unsigned char*>(b.data);
        std::memset(p, t + 1, bytes);
        std::this_thread::yield();
        for (size_t k = 0; k < bytes; k += 4096) bad[t] += p[k] != t + 1;  // nobody else wrote
        ReleaseOutputBlock(b.owner);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad, std::vector<int>(4, 0));
}

}  // namespace
}  // namespace glmnorm
