// The measuring loop behind `glmnorm bench`: each case is timed alternately
// with a plain copy of the same number of bytes in the same run (the speed of
// light of this machine right now), and reported as GB/s and as a fraction
// of that copy speed.
#ifndef GLMNORM_TOOLS_BENCH_RUNNER_H_
#define GLMNORM_TOOLS_BENCH_RUNNER_H_

#include <cstdint>
#include <functional>
#include <string>

#include "glmnorm/dtype.h"
#include "hwy/aligned_allocator.h"

namespace glmnorm::tools {

struct BenchCase {
  std::string kernel;  // "rms_norm", ...
  std::string shape;   // e.g. "4096x5120" or "512x104x128"
  std::string dtype;   // "bf16", "f32"
  int threads = 1;
  int64_t rows = 0;
  int64_t width = 0;
  int64_t model_bytes = 0;          // bytes the kernel must read + write
  std::function<void()> run;        // one call of the kernel
  std::function<int64_t()> max_ulp;  // error of the last output vs float64
};

// "bf16", "f16" or "f32"; throws glmnorm::Error otherwise.
DType ParseBenchDType(const std::string& s);

// An aligned buffer of `elements` values drawn from Normal(mean, stddev)
// (all equal to mean when stddev is 0), alive as long as its case.
struct BenchTensor {
  BenchTensor(DType t, int64_t elements, double stddev, double mean, uint64_t seed);
  void* data() { return bytes.get(); }
  hwy::AlignedFreeUniquePtr<uint8_t[]> bytes;
  DType dtype;
  int64_t n;
};

struct BenchResult {
  double ns = 0;        // median time of one kernel call
  double copy_ns = 0;   // median time of one copy of model_bytes / 2: the faster
                        // of memcpy and a streaming-store copy
  bool copy_stream = false;  // the streaming-store copy was the faster
  double gbps = 0;
  double copy_gbps = 0;
  double copy_fraction = 0;
  int64_t max_ulp = 0;
};

// Times c and the same-run copy (both on c.threads threads).
BenchResult Measure(const BenchCase& c, double min_seconds);

void PrintHeader();
void PrintRow(const BenchCase& c, const BenchResult& r, bool json);

}  // namespace glmnorm::tools

#endif  // GLMNORM_TOOLS_BENCH_RUNNER_H_
