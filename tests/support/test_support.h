// Shared helpers of every test binary: seeded random data, typed buffers, the
// loop over every compiled SIMD target, the oracle comparison, and the one
// element-by-element ulp comparison with its limits.
#ifndef GLMNORM_TESTS_SUPPORT_TEST_SUPPORT_H_
#define GLMNORM_TESTS_SUPPORT_TEST_SUPPORT_H_

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "glmnorm/glmnorm.h"

namespace glmnorm::test {

// The seed of this test run: GLMNORM_SEED from the environment, else fresh.
// Printed once so a failure can be replayed.
uint64_t Seed();
std::mt19937_64& Rng();

// A byte buffer with room before the data so tests can misalign pointers.
struct Buffer {
  Buffer(DType dtype, size_t elements, size_t misalign_elements = 0);
  void* data() { return bytes.data() + offset; }
  const void* data() const { return bytes.data() + offset; }
  double Get(size_t i) const;
  void Set(size_t i, double v);  // rounds to dtype
  DType dtype;
  size_t size;
  size_t offset;
  std::vector<uint8_t> bytes;
};

// Normal(0, 1) values times a per-call scale (log-uniform 1e-3 .. 1e2).
void FillRandom(Buffer& b, double scale = 0.0);
// Gammas: around 1 with spread, a few small and negative.
void FillGamma(Buffer& b);

// Runs fn once per SIMD target compiled into the library and supported by
// this CPU, with dispatch forced to that target and the portable bf16
// rounding; on AVX-512 CPUs with AVX512-BF16 once more with the native
// conversion ("AVX3+BF16"). fn gets the target name.
void ForEachTarget(const std::function<void(const char*)>& fn);

// The n bytes at p, for comparing outputs bit for bit.
std::vector<uint8_t> BytesOf(const void* p, size_t n);

// Runs `run` once per target (ForEachTarget); it returns the bytes of its
// outputs. Every target's bytes must equal the first target's: a failure
// names `what`, both targets and the first differing byte. Returns the
// first target's bytes.
std::vector<uint8_t> ExpectSameBitsOnEveryTarget(
    const std::string& what, const std::function<std::vector<uint8_t>(const char*)>& run);

struct OracleStats {
  int64_t elements = 0;
  int64_t max_ulp = 0;      // against the nearer of the oracle's candidates
  int64_t over_limit = 0;   // elements beyond the limit
  std::string first_failure;
};

// Compares y (already computed by the library) with the float64 oracle.
// In cast-then-scale mode with a 16-bit input the reference rounds x*r to
// the input dtype; when x*r lies within 2^-20 (relative) of a rounding
// midpoint, float32 arithmetic may legitimately round either way, so both
// roundings are accepted as the oracle's h.
OracleStats CompareWithOracle(const ConstTensorView& x, const ConstTensorView& gamma,
                              const ConstTensorView& y, const NormOptions& options,
                              int64_t ulp_limit);

// The ulp limit the library promises for an output dtype: 1 for bf16/f16,
// 4 for f32 (its float32 reduction order is its own, not PyTorch's, so a
// golden made by PyTorch may differ from it by that much).
constexpr int64_t UlpLimit(DType y) { return y == DType::kF32 ? 4 : 1; }

// ---------------------------------------------------------- ulp comparison
//
// The distance between two elements is reference::UlpDistance
// (src/reference/oracle.h), the oracle's: +0 and -0 are 0 apart, so are two
// NaNs (of any sign or payload), and a NaN and a number are
// reference::kNaNUlpDistance apart.

// reference::UlpDistance of two values of `dtype` given by their raw bits
// (16 bits for bf16/f16, 32 for f32), as the golden data holds them.
int64_t UlpDistance(DType dtype, uint32_t a_bits, uint32_t b_bits);

// Element-by-element comparison of two equally long arrays of one dtype.
struct UlpStats {
  int64_t elements = 0;
  int64_t identical = 0;          // 0 ulp apart
  int64_t one_ulp = 0;            // exactly 1 ulp apart
  int64_t max_ulp = 0;
  int64_t first_difference = -1;  // index of the first element not 0 ulp apart
  int64_t first_worse = -1;       // index of the first element more than 1 ulp apart
  // Filled by CompareUlp only (Add sees distances, not bits):
  int64_t bit_mismatches = 0;     // bits differ beyond a NaN's payload (+0 vs -0 too)
  int64_t first_bit_mismatch = -1;
  int64_t nan_mismatches = 0;     // NaN on one side only, or NaNs of opposite signs
  int64_t first_nan_mismatch = -1;

  // Counts element `index`, `ulps` apart.
  void Add(int64_t index, int64_t ulps);
  int64_t differ() const { return elements - identical; }        // not 0 ulp apart
  int64_t worse() const { return elements - identical - one_ulp; }  // more than 1 ulp
  double IdenticalPercent() const;
  // The bf16 bar of the golden tests: at least 99.99% of the elements 0 ulp
  // apart and none more than 1 ulp.
  bool MeetsBf16Bar() const;
  // "N elements: identical I (P%), 1 ulp O, worse W, max ulp M[, first worse at F]"
  std::string Summary() const;
};

// Compares `got` with `want`, `elements` values of `dtype` each, read from
// their storage.
UlpStats CompareUlp(DType dtype, const void* got, const void* want, int64_t elements);
// The same over raw bits (one element per entry, as UlpDistance above);
// throws std::invalid_argument when the lengths differ.
UlpStats CompareUlp(DType dtype, const std::vector<uint32_t>& got_bits,
                    const std::vector<uint32_t>& want_bits);

}  // namespace glmnorm::test

#endif  // GLMNORM_TESTS_SUPPORT_TEST_SUPPORT_H_
