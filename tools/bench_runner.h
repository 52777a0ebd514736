// The measuring loop behind `glmnorm bench`: each case is timed alternately
// with a plain copy of the same number of bytes in the same run (the speed of
// light of this machine right now), and with a pass that moves the same
// streams as the kernel (its own speed of light: an op reading two tensors
// and writing two is not a copy), and reported as GB/s and as fractions of
// both.
#ifndef GLMNORM_TOOLS_BENCH_RUNNER_H_
#define GLMNORM_TOOLS_BENCH_RUNNER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "glmnorm/dtype.h"
#include "hwy/aligned_allocator.h"

namespace glmnorm::tools {

// The estimated work (JobSize::work_ns) of the baselines' plain streaming
// passes, per byte moved: RmsNorm f32's rate (0.18 ns per element, 8 bytes
// moved; core/work_cost.h), so that a baseline splits over threads as the
// kernel it stands beside does.
constexpr double kStreamNsPerByte = 0.023;

// The large tensors a kernel reads and writes, in bytes, for its same-streams
// baseline (gammas, tables and per-row scales stay in cache and are left
// out). write_over[i] >= 0: write stream i overwrites read stream
// write_over[i] (in place, as the kernel does); -1: its own buffer.
struct Streams {
  std::vector<int64_t> read, write;
  std::vector<int> write_over;
  Streams& Read(int64_t bytes) {
    read.push_back(bytes);
    return *this;
  }
  Streams& Write(int64_t bytes, int over = -1) {
    write.push_back(bytes);
    write_over.push_back(over);
    return *this;
  }
};

struct BenchCase {
  std::string kernel;  // "rms_norm", ...
  std::string shape;   // e.g. "4096x5120" or "512x104x128"
  std::string dtype;   // "bf16", "f32"
  int threads = 1;
  int64_t rows = 0;
  int64_t width = 0;
  int64_t model_bytes = 0;          // bytes the kernel must read + write
  Streams streams;                  // empty: one read and one write of model_bytes / 2
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
  double streams_ns = 0;  // the faster of the same-streams pass (median;
                          // streaming stores for outputs of 4 MiB and more, as
                          // the kernels) and the copy of model_bytes
  double streams_fraction = 0;  // streams_ns / ns
  int64_t max_ulp = 0;
};

// Times c and the same-run copy (both on c.threads threads).
BenchResult Measure(const BenchCase& c, double min_seconds);

void PrintHeader();
void PrintRow(const BenchCase& c, const BenchResult& r, bool json);

}  // namespace glmnorm::tools

#endif  // GLMNORM_TOOLS_BENCH_RUNNER_H_
