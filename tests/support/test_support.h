// Shared helpers of the core tests: seeded random data, typed buffers, the
// loop over every compiled SIMD target, and the oracle comparison.
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
// this CPU, with dispatch forced to that target. fn gets the target name.
void ForEachTarget(const std::function<void(const char*)>& fn);

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
// 4 for f32.
int64_t UlpLimit(DType y);

}  // namespace glmnorm::test

#endif  // GLMNORM_TESTS_SUPPORT_TEST_SUPPORT_H_
