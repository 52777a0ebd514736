#include "bench_runner.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

#include <random>

#include <emmintrin.h>

#include <nlohmann/json.hpp>

#include "glmnorm/error.h"
#include "glmnorm/execution.h"
#include "backend/cpu/cpu_backend.h"
#include "core/work_cost.h"
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
  const JobSize size{.rows = blocks, .work_ns = work_cost::Ns(2 * bytes, kStreamNsPerByte)};
  cpu::RunRows({}, size, [&](int64_t b0, int64_t b1) {
    const int64_t begin = b0 * kBlock, end = std::min(bytes, b1 * kBlock);
    if (stream) {
      StreamCopy(dst + begin, src + begin, end - begin);
    } else {
      std::memcpy(dst + begin, src + begin, static_cast<size_t>(end - begin));
    }
  });
}

// The same-streams baseline: every read stream read and every write stream
// written, line by line in lockstep (64-byte line L of the largest stream
// goes with line L >> shift of a stream 2^shift times smaller, e.g. the
// 1-byte codes of a bf16 input), so all streams are in flight at once as in
// a kernel's row; split over the default pool like a kernel. (Moving 1 KiB
// of each stream in turn instead ran 15-20% slower than a copy of the same
// bytes.) Reads are folded
// into a value (XOR) that the writes store, so the compiler can drop
// neither. SSE2 16-byte accesses: at memory speed the width does not matter
// (for cache-resident shapes, read of_copy instead).
class StreamsPass {
 public:
  static constexpr int64_t kTaskLines = 1024;  // the unit of the thread split
  static constexpr int kMaxShift = 3;  // streams down to 1/8 of the largest
  explicit StreamsPass(const Streams& s) {
    int64_t largest = 64;
    for (const auto* bytes : {&s.read, &s.write}) {
      for (int64_t b : *bytes) {
        largest = std::max(largest, b);
        total_ += b;  // in-place writes move bytes too
      }
    }
    lines_ = (largest + 63) / 64;
    for (int64_t b : s.read) read_.push_back(Add(b));
    for (size_t i = 0; i < s.write.size(); ++i) {
      if (s.write_over[i] >= 0) {
        Stream w = read_[s.write_over[i]];
        w.in_place = true;
        write_.push_back(w);
      } else {
        write_.push_back(Add(s.write[i]));
      }
    }
  }
  void Run(bool stream) {
    const JobSize size{.rows = lines_ / kTaskLines + 1,
                       .work_ns = work_cost::Ns(total_, kStreamNsPerByte)};
    cpu::RunRows({}, size, [&](int64_t t0, int64_t t1) {
      __m128i acc = _mm_set1_epi32(1);
      const __m128i fill = _mm_set1_epi32(static_cast<int>(t0));
      const int64_t end = std::min(lines_, t1 * kTaskLines);
      for (int64_t line = t0 * kTaskLines; line < end; ++line) {
        for (const Stream& r : read_) {
          if ((line & r.mask) != 0) continue;
          const auto* q = reinterpret_cast<const __m128i*>(r.data + (line >> r.shift) * 64);
          acc = _mm_xor_si128(acc, _mm_xor_si128(_mm_xor_si128(_mm_load_si128(q), _mm_load_si128(q + 1)),
                                                 _mm_xor_si128(_mm_load_si128(q + 2), _mm_load_si128(q + 3))));
        }
        for (const Stream& w : write_) {
          if ((line & w.mask) != 0) continue;
          auto* q = reinterpret_cast<__m128i*>(w.data + (line >> w.shift) * 64);
          if (stream && !w.in_place) {
            for (int k = 0; k < 4; ++k) _mm_stream_si128(q + k, fill);
          } else {
            for (int k = 0; k < 4; ++k) _mm_store_si128(q + k, fill);
          }
        }
      }
      if (stream) _mm_sfence();
      sink_.fetch_xor(_mm_cvtsi128_si32(acc), std::memory_order_relaxed);
    });
  }

 private:
  struct Stream {
    char* data;
    int shift;     // line L of the largest stream goes with line L >> shift
    int64_t mask;  // (1 << shift) - 1: this stream moves when (L & mask) == 0
    bool in_place = false;  // over a read stream: its lines are cached, plain stores
  };
  Stream Add(int64_t bytes) {
    // Element sizes are 1, 2 or 4 bytes, so sizes differ by powers of two.
    int shift = 0;
    while (shift < kMaxShift && bytes << (shift + 1) <= lines_ * 64) ++shift;
    const size_t alloc = static_cast<size_t>(((lines_ >> shift) + 1) * 64);
    buffers_.push_back(hwy::AllocateAligned<char>(alloc));
    std::memset(buffers_.back().get(), 1, alloc);
    return {buffers_.back().get(), shift, (int64_t{1} << shift) - 1};
  }

  std::vector<hwy::AlignedFreeUniquePtr<char[]>> buffers_;
  std::vector<Stream> read_, write_;
  int64_t lines_ = 1;
  int64_t total_ = 0;
  std::atomic<int> sink_{0};
};

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
  // Each copy has its own source and destination: with one shared source the
  // second copy read it from a last-level cache that the first had just
  // filled (105 MiB of L3 on the Xeon of docs/PERFORMANCE.md), so the baseline
  // ran faster than memory for shapes under ~50 MiB.
  const auto buffer = [copy_bytes](int value) {
    auto b = hwy::AllocateAligned<char>(static_cast<size_t>(copy_bytes));
    std::memset(b.get(), value, static_cast<size_t>(copy_bytes));
    return b;
  };
  auto src = buffer(1), dst = buffer(0), src2 = buffer(1), dst2 = buffer(0);
  const auto memcpy_copy = [&] { ParallelCopy(dst.get(), src.get(), copy_bytes, false); };
  const auto stream_copy = [&] { ParallelCopy(dst2.get(), src2.get(), copy_bytes, true); };
  Streams streams = c.streams;
  if (streams.read.empty() && streams.write.empty()) {
    streams.Read(c.model_bytes / 2).Write(c.model_bytes / 2);
  }
  StreamsPass pass(streams);
  // Streaming stores where the kernels use them (outputs of kStreamMinBytes
  // and more, not in place), plain stores otherwise: one variant, since alternating both left
  // the plain pass's dirty lines in the cache for the streaming pass to evict
  // (it then ran 25% slower than a copy of the same bytes).
  int64_t written = 0;
  for (int64_t b : streams.write) written += b;
  const bool stream_stores = written >= cpu::kStreamMinBytes;
  const auto streams_pass = [&] { pass.Run(stream_stores); };

  // Warm up all four, then size a sample to ~1 ms (at least one call).
  c.run();
  memcpy_copy();
  stream_copy();
  streams_pass();
  int64_t iters = 1;
  while (TimeIters(c.run, iters) < 1e-3 && iters < (int64_t{1} << 24)) iters *= 2;

  // Alternate kernel and copy samples so drift hits all alike.
  std::vector<double> kernel_ns, memcpy_ns, stream_ns, pass_ns;
  const auto start = Clock::now();
  do {
    kernel_ns.push_back(TimeIters(c.run, iters) * 1e9 / double(iters));
    memcpy_ns.push_back(TimeIters(memcpy_copy, iters) * 1e9 / double(iters));
    stream_ns.push_back(TimeIters(stream_copy, iters) * 1e9 / double(iters));
    pass_ns.push_back(TimeIters(streams_pass, iters) * 1e9 / double(iters));
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
  // The faster of the pass and the copy of as many bytes: for one read and
  // one write stream the two move the same streams, and this pass ran up to
  // 15% slower than the copy there (its per-stream bookkeeping), so the
  // copy is the better speed of light; with more streams the pass is.
  r.streams_ns = std::min(Median(pass_ns), double(c.model_bytes) / r.copy_gbps);
  r.streams_fraction = r.streams_ns / r.ns;
  r.max_ulp = c.max_ulp ? c.max_ulp() : -1;
  return r;
}

void PrintHeader() {
  std::printf("%-20s %-14s %-5s %7s %11s %8s %9s %-6s %8s %10s %7s\n", "kernel", "shape",
              "dtype", "threads", "median_us", "GB/s", "copy_GB/s", "copy", "of_copy",
              "of_streams", "max_ulp");
}

void PrintRow(const BenchCase& c, const BenchResult& r, bool json) {
  if (json) {
    const nlohmann::json j = {
        {"kernel", c.kernel}, {"shape", c.shape},     {"width", c.width},
        {"rows", c.rows},     {"dtype", c.dtype},     {"threads", c.threads},
        {"ns", r.ns},         {"gbps", r.gbps},       {"copy_ns", r.copy_ns},
        {"copy_gbps", r.copy_gbps}, {"copy_fraction", r.copy_fraction},
        {"copy", r.copy_stream ? "stream" : "memcpy"},
        {"streams_ns", r.streams_ns}, {"streams_fraction", r.streams_fraction},
        {"max_ulp", r.max_ulp}, {"model_bytes", c.model_bytes}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    // max_ulp -1: the case has no float64 reference check ("-").
    const std::string ulp = r.max_ulp < 0 ? "-" : std::to_string(r.max_ulp);
    std::printf("%-20s %-14s %-5s %7d %11.2f %8.2f %9.2f %-6s %8.2f %10.2f %7s\n",
                c.kernel.c_str(), c.shape.c_str(), c.dtype.c_str(), c.threads, r.ns / 1e3,
                r.gbps, r.copy_gbps, r.copy_stream ? "stream" : "memcpy", r.copy_fraction,
                r.streams_fraction, ulp.c_str());
  }
  std::fflush(stdout);
}

}  // namespace glmnorm::tools
