#include "bench_runner.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include <random>

#include <nlohmann/json.hpp>

#include "glmnorm/error.h"
#include "glmnorm/execution.h"
#include "backend/cpu/cpu_backend.h"
#include "reference/reference.h"

namespace glmnorm::tools {

namespace {

using Clock = std::chrono::steady_clock;

// Copies `bytes` from src to dst, split over the default pool like a kernel.
void ParallelCopy(char* dst, const char* src, int64_t bytes) {
  constexpr int64_t kBlock = 64 * 1024;
  const int64_t blocks = (bytes + kBlock - 1) / kBlock;
  cpu::RunRows({}, {blocks, 2 * bytes}, [&](int64_t b0, int64_t b1) {
    const int64_t begin = b0 * kBlock, end = std::min(bytes, b1 * kBlock);
    std::memcpy(dst + begin, src + begin, static_cast<size_t>(end - begin));
  });
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Seconds for `iters` calls of fn.
template <class Fn>
double TimeIters(const Fn& fn, int64_t iters) {
  const auto t0 = Clock::now();
  for (int64_t i = 0; i < iters; ++i) fn();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

DType ParseBenchDType(const std::string& s) {
  if (s == "bf16") return DType::kBF16;
  if (s == "f16") return DType::kF16;
  if (s == "f32") return DType::kF32;
  throw Error("bench: --dtype must be bf16, f16 or f32, got '" + s + "'");
}

BenchTensor::BenchTensor(DType t, int64_t elements, double stddev, double mean, uint64_t seed)
    : bytes(hwy::AllocateAligned<uint8_t>(size_t(elements) * SizeOf(t))), dtype(t), n(elements) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (int64_t i = 0; i < n; ++i) {
    reference::Store(bytes.get(), t, i, stddev == 0.0 ? mean : mean + stddev * normal(rng));
  }
}

BenchResult Measure(const BenchCase& c, double min_seconds) {
  SetNumThreads(c.threads);
  const int64_t copy_bytes = std::max<int64_t>(1, c.model_bytes / 2);
  std::vector<char> src(copy_bytes, 1), dst(copy_bytes, 0);
  const auto copy = [&] { ParallelCopy(dst.data(), src.data(), copy_bytes); };

  // Warm up both, then size a sample to ~1 ms (at least one call).
  c.run();
  copy();
  int64_t iters = 1;
  while (TimeIters(c.run, iters) < 1e-3 && iters < (int64_t{1} << 24)) iters *= 2;

  // Alternate kernel and copy samples so drift hits both alike.
  std::vector<double> kernel_ns, copy_ns;
  const auto start = Clock::now();
  do {
    kernel_ns.push_back(TimeIters(c.run, iters) * 1e9 / double(iters));
    copy_ns.push_back(TimeIters(copy, iters) * 1e9 / double(iters));
  } while (kernel_ns.size() < 5 ||
           (std::chrono::duration<double>(Clock::now() - start).count() < min_seconds &&
            kernel_ns.size() < 1000));

  BenchResult r;
  r.ns = Median(kernel_ns);
  r.copy_ns = Median(copy_ns);
  r.gbps = double(c.model_bytes) / r.ns;
  r.copy_gbps = double(2 * copy_bytes) / r.copy_ns;
  r.copy_fraction = r.gbps / r.copy_gbps;
  r.max_ulp = c.max_ulp ? c.max_ulp() : -1;
  return r;
}

void PrintHeader() {
  std::printf("%-20s %-14s %-5s %7s %11s %8s %9s %8s %7s\n", "kernel", "shape", "dtype",
              "threads", "median_us", "GB/s", "copy_GB/s", "of_copy", "max_ulp");
}

void PrintRow(const BenchCase& c, const BenchResult& r, bool json) {
  if (json) {
    const nlohmann::json j = {
        {"kernel", c.kernel}, {"shape", c.shape},     {"width", c.width},
        {"rows", c.rows},     {"dtype", c.dtype},     {"threads", c.threads},
        {"ns", r.ns},         {"gbps", r.gbps},       {"copy_ns", r.copy_ns},
        {"copy_gbps", r.copy_gbps}, {"copy_fraction", r.copy_fraction},
        {"max_ulp", r.max_ulp}, {"model_bytes", c.model_bytes}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    // max_ulp -1: the case has no float64 reference check ("-").
    const std::string ulp = r.max_ulp < 0 ? "-" : std::to_string(r.max_ulp);
    std::printf("%-20s %-14s %-5s %7d %11.2f %8.2f %9.2f %8.2f %7s\n", c.kernel.c_str(),
                c.shape.c_str(), c.dtype.c_str(), c.threads, r.ns / 1e3, r.gbps, r.copy_gbps,
                r.copy_fraction, ulp.c_str());
  }
  std::fflush(stdout);
}

}  // namespace glmnorm::tools
