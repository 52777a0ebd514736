// Small calls at 1 and 2 threads, back to back and after a pause in which the
// pool's workers fall asleep (as between the norms of a decoder, whose GEMMs
// and attention run in between). `glmnorm bench` times calls back to back
// only, where the workers are always spinning. Median of each run, best of 3
// runs per thread count, microseconds (docs/PERFORMANCE.md, "Threads for small
// calls").
//
//   build/release/bench/threads_after_pause [substring of a case name]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "glmnorm/glmnorm.h"

namespace {

using glmnorm::DType;

double NowUs() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Buffers of normal random values in their dtype, alive for the whole run.
class Buffers {
 public:
  void* Random(int64_t elements, DType dtype) {
    std::vector<char>& b = store_.emplace_back(elements * glmnorm::SizeOf(dtype));
    for (int64_t i = 0; i < elements; ++i) {
      const float f = normal_(rng_);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      if (dtype == DType::kBF16) {
        const uint16_t top = static_cast<uint16_t>(bits >> 16);
        std::memcpy(&b[i * 2], &top, 2);
      } else {
        std::memcpy(&b[i * 4], &f, 4);
      }
    }
    return b.data();
  }
  // Gammas as checkpoints hold them, around 1: a gamma near 0 sends rows to
  // the kernels' exact path for results that may be subnormal.
  void* Gamma(int64_t width, DType dtype) {
    void* g = Random(width, dtype);
    for (int64_t i = 0; i < width; ++i) {
      const float f = 0.5f + uniform_(rng_);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      if (dtype == DType::kBF16) {
        const uint16_t top = static_cast<uint16_t>(bits >> 16);
        std::memcpy(static_cast<char*>(g) + i * 2, &top, 2);
      } else {
        std::memcpy(static_cast<char*>(g) + i * 4, &f, 4);
      }
    }
    return g;
  }
  void* Zeros(int64_t bytes) { return store_.emplace_back(bytes).data(); }

 private:
  std::mt19937 rng_{1};
  std::normal_distribution<float> normal_;
  std::uniform_real_distribution<float> uniform_;
  std::vector<std::vector<char>> store_;
};

struct Case {
  std::string name;
  std::function<void()> call;
};

std::vector<Case> Cases(Buffers& buffers) {
  std::vector<Case> cases;
  struct Shape {
    int64_t rows, width;
    DType dtype;
  };
  for (const Shape s : {Shape{2, 4096, DType::kF32}, Shape{4, 4096, DType::kF32},
                        Shape{4, 5120, DType::kBF16}, Shape{8, 5120, DType::kF32},
                        Shape{16, 5120, DType::kBF16}, Shape{16, 5120, DType::kF32},
                        Shape{32, 5120, DType::kBF16}, Shape{64, 5120, DType::kF32}}) {
    const auto x = glmnorm::Contiguous<const void*>(buffers.Random(s.rows * s.width, s.dtype),
                                                    s.dtype, {s.rows, s.width});
    const auto gamma =
        glmnorm::Contiguous<const void*>(buffers.Gamma(s.width, s.dtype), s.dtype, {s.width});
    const auto y = glmnorm::Contiguous<void*>(
        buffers.Zeros(s.rows * s.width * glmnorm::SizeOf(s.dtype)), s.dtype, {s.rows, s.width});
    cases.push_back({"rms_norm " + std::to_string(s.rows) + "x" + std::to_string(s.width) + " " +
                         std::string(glmnorm::Name(s.dtype)),
                     [=] { glmnorm::RmsNorm(x, gamma, y); }});
  }
  for (int64_t rows : {2, 4, 16}) {
    const auto x = glmnorm::Contiguous<const void*>(buffers.Random(rows * 5120, DType::kBF16),
                                                    DType::kBF16, {rows, 5120});
    const auto gamma = glmnorm::Contiguous<const void*>(buffers.Gamma(5120, DType::kBF16),
                                                        DType::kBF16, {5120});
    const auto q = glmnorm::Contiguous<void*>(buffers.Zeros(rows * 5120), DType::kF8E4M3,
                                              {rows, 5120});
    glmnorm::QuantOptions quant;
    quant.scales = glmnorm::Contiguous<void*>(buffers.Zeros(rows * 4), DType::kF32, {rows});
    cases.push_back({"rms_norm_quant " + std::to_string(rows) + "x5120 bf16",
                     [=] { glmnorm::RmsNormQuant(x, gamma, q, quant); }});
  }
  for (int64_t tokens : {2, 4, 16}) {
    constexpr int64_t kWidth = (96 + 8 + 8) * 128;  // GLM-4.5's fused QKV
    const auto qkv = glmnorm::Rows<void*>(buffers.Random(tokens * kWidth, DType::kBF16),
                                          DType::kBF16, tokens, kWidth, kWidth);
    const auto gamma = glmnorm::Contiguous<const void*>(buffers.Gamma(128, DType::kBF16),
                                                        DType::kBF16, {128});
    cases.push_back({"qk_norm " + std::to_string(tokens) + "x104x128 bf16", [=] {
                       glmnorm::QkNorm(glmnorm::AsConst(qkv), qkv, glmnorm::QkHeads{}, gamma,
                                       gamma);
                     }});
  }
  return cases;
}

// Median time of one call, each call after `pause_us` of busy waiting.
double MedianUs(const Case& c, double pause_us) {
  for (int i = 0; i < 50; ++i) c.call();
  std::vector<double> times;
  const int calls = pause_us >= 1000 ? 150 : 400;
  for (int i = 0; i < calls; ++i) {
    const double until = NowUs() + pause_us;
    while (NowUs() < until) {
    }
    const double start = NowUs();
    c.call();
    times.push_back(NowUs() - start);
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  Buffers buffers;
  const std::vector<Case> cases = Cases(buffers);
  std::printf("%-28s %9s %10s %10s %8s\n", "case", "pause_us", "1_thread", "2_threads", "2t/1t");
  for (const Case& c : cases) {
    if (argc > 1 && c.name.find(argv[1]) == std::string::npos) continue;
    for (double pause_us : {0.0, 200.0, 2000.0}) {
      double best[3] = {1e30, 1e30, 1e30};
      for (int run = 0; run < 3; ++run) {
        for (int threads : {1, 2}) {
          glmnorm::SetNumThreads(threads);
          best[threads] = std::min(best[threads], MedianUs(c, pause_us));
        }
      }
      std::printf("%-28s %9.0f %10.2f %10.2f %8.2f\n", c.name.c_str(), pause_us, best[1], best[2],
                  best[2] / best[1]);
      std::fflush(stdout);
    }
  }
  return 0;
}
