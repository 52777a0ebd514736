#include "support/test_support.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "hwy/highway.h"
#include "hwy/targets.h"
#include "reference/reference.h"

namespace glmnorm::test {

uint64_t Seed() {
  static const uint64_t seed = [] {
    uint64_t s;
    if (const char* env = std::getenv("GLMNORM_SEED")) {
      s = std::strtoull(env, nullptr, 10);
    } else {
      s = (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
    }
    std::printf("[glmnorm] random seed %llu (replay with GLMNORM_SEED=%llu)\n",
                static_cast<unsigned long long>(s), static_cast<unsigned long long>(s));
    return s;
  }();
  return seed;
}

std::mt19937_64& Rng() {
  static std::mt19937_64 rng(Seed());
  return rng;
}

Buffer::Buffer(DType t, size_t elements, size_t misalign_elements)
    : dtype(t),
      size(elements),
      offset(misalign_elements * SizeOf(t)),
      bytes(offset + elements * SizeOf(t) + 64) {}

double Buffer::Get(size_t i) const { return reference::Load(data(), dtype, int64_t(i)); }
void Buffer::Set(size_t i, double v) { reference::Store(data(), dtype, int64_t(i), v); }

void FillRandom(Buffer& b, double scale) {
  if (scale == 0.0) {
    std::uniform_real_distribution<double> log_scale(-3.0, 2.0);
    scale = std::pow(10.0, log_scale(Rng()));
  }
  std::normal_distribution<double> normal(0.0, 1.0);
  for (size_t i = 0; i < b.size; ++i) b.Set(i, normal(Rng()) * scale);
}

void FillGamma(Buffer& b) {
  std::normal_distribution<double> normal(1.0, 0.3);
  std::uniform_int_distribution<int> pick(0, 19);
  for (size_t i = 0; i < b.size; ++i) {
    double g = normal(Rng());
    const int p = pick(Rng());
    if (p == 0) g = -g;
    if (p == 1) g *= 1e-3;
    b.Set(i, g);
  }
}

void ForEachTarget(const std::function<void(const char*)>& fn) {
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    fn(hwy::TargetName(target));
  }
  hwy::SetSupportedTargetsForTest(0);
}

int64_t UlpLimit(DType y) { return y == DType::kF32 ? 4 : 1; }

OracleStats CompareWithOracle(const ConstTensorView& x, const ConstTensorView& gamma,
                              const ConstTensorView& y, const NormOptions& options,
                              int64_t ulp_limit) {
  const auto r = reference::CompareRmsNorm(x, gamma, y, options, ulp_limit, x.rows());
  OracleStats stats;
  stats.elements = r.elements;
  stats.max_ulp = r.max_ulp;
  stats.over_limit = r.over_limit;
  stats.first_failure = r.first_failure;
  return stats;
}

}  // namespace glmnorm::test
