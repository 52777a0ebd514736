#include "bench_runner.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include <random>

#include <emmintrin.h>

#include <nlohmann/json.hpp>

#include "glmnorm/error.h"
#include "glmnorm/execution.h"
#include "backend/cpu/cpu_backend.h"
#include "reference/reference.h"

namespace glmnorm::tools {

namespace {

using Clock = std::chrono::steady_clock;

// Copies n bytes with non-temporal stores (16-byte aligned dst and n a
// multiple of 16): what a large copy costs when the destination lines are
// not read first, as the kernels' streaming stores do. SSE2 is in every
// x86-64 CPU; the store width does not matter at memory speed.
void StreamCopy(char* dst, const char* src, int64_t n) {
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
  }
  for (; i < n; i += 16) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
  }
  _mm_sfence();
}

// Copies `bytes` from src to dst, split over the default pool like a kernel
// (the same row split, in 64 KiB blocks), with memcpy or streaming stores.
void ParallelCopy(char* dst, const char* src, int64_t bytes, bool stream) {
  constexpr int64_t kBlock = 64 * 1024;
  const int64_t blocks = (bytes + kBlock - 1) / kBlock;
  cpu::RunRows({}, {blocks, 2 * bytes}, [&](int64_t b0, int64_t b1) {
    const int64_t begin = b0 * kBlock, end = std::min(bytes, b1 * kBlock);
    if (stream) {
      StreamCopy(dst + begin, src + begin, end - begin);
    } else {
      std::memcpy(dst + begin, src + begin, static_cast<size_t>(end - begin));
    }
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

namespace {
// A benchmark tensor may take at most this much memory (the machines this
// runs on have a few tens of GiB); more is a usage error, not a crash.
constexpr int64_t kMaxBenchTensorBytes = int64_t{8} << 30;

size_t CheckedBytes(DType t, int64_t elements) {
  int64_t bytes = 0;
  if (elements < 0 || __builtin_mul_overflow(elements, int64_t(SizeOf(t)), &bytes) ||
      bytes > kMaxBenchTensorBytes) {
    throw Error("bench: an input of " + std::to_string(elements) + " " +
                std::string(Name(t)) + " elements is larger than 8 GiB; use fewer --tokens");
  }
  return static_cast<size_t>(bytes);
}
}  // namespace

BenchTensor::BenchTensor(DType t, int64_t elements, double stddev, double mean, uint64_t seed)
    : bytes(hwy::AllocateAligned<uint8_t>(CheckedBytes(t, elements))), dtype(t), n(elements) {
  if (bytes == nullptr && elements > 0) {
    throw Error("bench: cannot allocate " + std::to_string(elements * SizeOf(t)) +
                " bytes for an input; use fewer --tokens");
  }
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (int64_t i = 0; i < n; ++i) {
    reference::Store(bytes.get(), t, i, stddev == 0.0 ? mean : mean + stddev * normal(rng));
  }
}

BenchResult Measure(const BenchCase& c, double min_seconds) {
  SetNumThreads(c.threads);
  // The speed of light: the faster of memcpy and a streaming-store copy of
  // the same bytes (half read, half written), with the kernels' row split.
  // Blocks of 16 bytes, 64-byte aligned, so both copies move the same bytes.
  const int64_t copy_bytes = std::max<int64_t>(16, (c.model_bytes / 2 + 15) / 16 * 16);
  auto src = hwy::AllocateAligned<char>(static_cast<size_t>(copy_bytes));
  auto dst = hwy::AllocateAligned<char>(static_cast<size_t>(copy_bytes));
  std::memset(src.get(), 1, static_cast<size_t>(copy_bytes));
  std::memset(dst.get(), 0, static_cast<size_t>(copy_bytes));
  const auto memcpy_copy = [&] { ParallelCopy(dst.get(), src.get(), copy_bytes, false); };
  const auto stream_copy = [&] { ParallelCopy(dst.get(), src.get(), copy_bytes, true); };

  // Warm up all three, then size a sample to ~1 ms (at least one call).
  c.run();
  memcpy_copy();
  stream_copy();
  int64_t iters = 1;
  while (TimeIters(c.run, iters) < 1e-3 && iters < (int64_t{1} << 24)) iters *= 2;

  // Alternate kernel and copy samples so drift hits all alike.
  std::vector<double> kernel_ns, memcpy_ns, stream_ns;
  const auto start = Clock::now();
  do {
    kernel_ns.push_back(TimeIters(c.run, iters) * 1e9 / double(iters));
    memcpy_ns.push_back(TimeIters(memcpy_copy, iters) * 1e9 / double(iters));
    stream_ns.push_back(TimeIters(stream_copy, iters) * 1e9 / double(iters));
  } while (kernel_ns.size() < 5 ||
           (std::chrono::duration<double>(Clock::now() - start).count() < min_seconds &&
            kernel_ns.size() < 1000));

  BenchResult r;
  r.ns = Median(kernel_ns);
  const double memcpy_median = Median(memcpy_ns), stream_median = Median(stream_ns);
  r.copy_stream = stream_median < memcpy_median;
  r.copy_ns = std::min(memcpy_median, stream_median);
  r.gbps = double(c.model_bytes) / r.ns;
  r.copy_gbps = double(2 * copy_bytes) / r.copy_ns;
  r.copy_fraction = r.gbps / r.copy_gbps;
  r.max_ulp = c.max_ulp ? c.max_ulp() : -1;
  return r;
}

void PrintHeader() {
  std::printf("%-20s %-14s %-5s %7s %11s %8s %9s %-6s %8s %7s\n", "kernel", "shape", "dtype",
              "threads", "median_us", "GB/s", "copy_GB/s", "copy", "of_copy", "max_ulp");
}

void PrintRow(const BenchCase& c, const BenchResult& r, bool json) {
  if (json) {
    const nlohmann::json j = {
        {"kernel", c.kernel}, {"shape", c.shape},     {"width", c.width},
        {"rows", c.rows},     {"dtype", c.dtype},     {"threads", c.threads},
        {"ns", r.ns},         {"gbps", r.gbps},       {"copy_ns", r.copy_ns},
        {"copy_gbps", r.copy_gbps}, {"copy_fraction", r.copy_fraction},
        {"copy", r.copy_stream ? "stream" : "memcpy"},
        {"max_ulp", r.max_ulp}, {"model_bytes", c.model_bytes}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    // max_ulp -1: the case has no float64 reference check ("-").
    const std::string ulp = r.max_ulp < 0 ? "-" : std::to_string(r.max_ulp);
    std::printf("%-20s %-14s %-5s %7d %11.2f %8.2f %9.2f %-6s %8.2f %7s\n", c.kernel.c_str(),
                c.shape.c_str(), c.dtype.c_str(), c.threads, r.ns / 1e3, r.gbps, r.copy_gbps,
                r.copy_stream ? "stream" : "memcpy", r.copy_fraction, ulp.c_str());
  }
  std::fflush(stdout);
}

}  // namespace glmnorm::tools
