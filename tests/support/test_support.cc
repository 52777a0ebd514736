#include "support/test_support.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <sstream>
#include <stdexcept>

#include <gtest/gtest.h>

#include <utility>

#include "core/cpu_features.h"
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
  const bool native_before = g_native_bf16;
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    // The portable rounding on every target; on AVX-512 also the native
    // bf16 conversion where this CPU has it (core/cpu_features.h).
    SetNativeConversions(false);
    fn(hwy::TargetName(target));
    if (target == HWY_AVX3 && SetNativeConversions(true)) fn("AVX3+BF16");
  }
  SetNativeConversions(native_before);
  hwy::SetSupportedTargetsForTest(0);
}

std::vector<uint8_t> BytesOf(const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  return std::vector<uint8_t>(b, b + n);
}

std::vector<uint8_t> ExpectSameBitsOnEveryTarget(
    const std::string& what, const std::function<std::vector<uint8_t>(const char*)>& run) {
  std::vector<uint8_t> first;
  std::string first_target;
  ForEachTarget([&](const char* target) {
    std::vector<uint8_t> bytes = run(target);
    if (first_target.empty()) {
      first = std::move(bytes);
      first_target = target;
      return;
    }
    if (bytes == first) return;
    size_t i = 0;
    while (i < bytes.size() && i < first.size() && bytes[i] == first[i]) ++i;
    ADD_FAILURE() << what << ": " << target << " differs from " << first_target << " at byte "
                  << i << " of " << first.size();
  });
  return first;
}

int64_t UlpDistance(DType dtype, uint32_t a_bits, uint32_t b_bits) {
  if (SizeOf(dtype) == 4) return reference::UlpDistance(dtype, &a_bits, &b_bits);
  const auto a = static_cast<uint16_t>(a_bits), b = static_cast<uint16_t>(b_bits);
  return reference::UlpDistance(dtype, &a, &b);
}

void UlpStats::Add(int64_t index, int64_t ulps) {
  ++elements;
  if (ulps == 0) {
    ++identical;
  } else {
    if (first_difference < 0) first_difference = index;
    if (ulps == 1) {
      ++one_ulp;
    } else if (first_worse < 0) {
      first_worse = index;
    }
  }
  if (ulps > max_ulp) max_ulp = ulps;
}

double UlpStats::IdenticalPercent() const {
  return elements == 0 ? 0.0
                       : 100.0 * static_cast<double>(identical) / static_cast<double>(elements);
}

bool UlpStats::MeetsBf16Bar() const {
  // identical / elements >= 99.99%, in integers.
  return elements > 0 && worse() == 0 && identical * 10000 >= elements * 9999;
}

std::string UlpStats::Summary() const {
  std::ostringstream s;
  s << elements << " elements: identical " << identical << " (" << std::fixed
    << std::setprecision(4) << IdenticalPercent() << "%), 1 ulp " << one_ulp << ", worse "
    << worse() << ", max ulp " << max_ulp;
  if (first_worse >= 0) s << ", first worse at " << first_worse;
  return s.str();
}

namespace {

// Counts element `index`: `got` and `want` point at one value of `dtype` each.
void AddElement(UlpStats& stats, DType dtype, int64_t index, const void* got, const void* want) {
  const int64_t ulps = reference::UlpDistance(dtype, got, want);
  stats.Add(index, ulps);
  // NaN-ness and signs of the values as float64 (exact for every float dtype).
  const double g = reference::Load(got, dtype, 0), w = reference::Load(want, dtype, 0);
  const bool g_nan = std::isnan(g), w_nan = std::isnan(w);
  const bool same_sign = std::signbit(g) == std::signbit(w);
  if (g_nan != w_nan || (g_nan && !same_sign)) {
    if (stats.first_nan_mismatch < 0) stats.first_nan_mismatch = index;
    ++stats.nan_mismatches;
  }
  if (ulps != 0 || !same_sign) {
    if (stats.first_bit_mismatch < 0) stats.first_bit_mismatch = index;
    ++stats.bit_mismatches;
  }
}

}  // namespace

UlpStats CompareUlp(DType dtype, const void* got, const void* want, int64_t elements) {
  const size_t size = SizeOf(dtype);
  const auto* g = static_cast<const uint8_t*>(got);
  const auto* w = static_cast<const uint8_t*>(want);
  UlpStats stats;
  for (int64_t i = 0; i < elements; ++i) AddElement(stats, dtype, i, g + i * size, w + i * size);
  return stats;
}

UlpStats CompareUlp(DType dtype, const std::vector<uint32_t>& got_bits,
                    const std::vector<uint32_t>& want_bits) {
  if (got_bits.size() != want_bits.size()) {
    throw std::invalid_argument("CompareUlp: " + std::to_string(got_bits.size()) + " vs " +
                                std::to_string(want_bits.size()) + " elements");
  }
  UlpStats stats;
  for (size_t i = 0; i < got_bits.size(); ++i) {
    // Each element as storage of its dtype: the low 16 bits for bf16/f16.
    const uint32_t g32 = got_bits[i], w32 = want_bits[i];
    const auto g16 = static_cast<uint16_t>(g32), w16 = static_cast<uint16_t>(w32);
    const bool wide = SizeOf(dtype) == 4;
    AddElement(stats, dtype, static_cast<int64_t>(i), wide ? static_cast<const void*>(&g32) : &g16,
               wide ? static_cast<const void*>(&w32) : &w16);
  }
  return stats;
}

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
