// RmsNorm on each compiled SIMD target, GLM-4.5 shapes, single thread:
// how much each target's kernel gains over the portable ones.
//   build/release/bench/targets_bench --benchmark_min_time=0.2
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "glmnorm/glmnorm.h"
#include "ops/rms_norm/rms_norm_cases.h"
#include "hwy/targets.h"

namespace {

using glmnorm::DType;

void BM_RmsNorm(benchmark::State& state, int64_t target, DType dtype, int64_t rows,
                int64_t width) {
  hwy::SetSupportedTargetsForTest(target);
  const size_t n = static_cast<size_t>(rows * width);
  std::vector<uint16_t> x16(n, glmnorm::BF16FromF32(0.5f)), y16(n), g16(width, 0x3F80);
  std::vector<float> x32(n, 0.5f), y32(n), g32(width, 1.0f);
  const bool bf16 = dtype == DType::kBF16;
  const void* x = bf16 ? static_cast<const void*>(x16.data()) : x32.data();
  void* y = bf16 ? static_cast<void*>(y16.data()) : y32.data();
  const void* g = bf16 ? static_cast<const void*>(g16.data()) : g32.data();
  const glmnorm::Executor serial = glmnorm::SerialExecutor();
  glmnorm::Execution on_caller;
  on_caller.executor = &serial;
  const auto xv = glmnorm::Contiguous<const void*>(x, dtype, {rows, width});
  const auto gv = glmnorm::Contiguous<const void*>(g, dtype, {width});
  const auto yv = glmnorm::Contiguous<void*>(y, dtype, {rows, width});
  for (auto _ : state) {
    glmnorm::RmsNorm(xv, gv, yv, {}, on_caller);
    benchmark::ClobberMemory();
  }
  const int64_t bytes = glmnorm::cases::RmsNormBytes(rows, width, dtype, dtype, dtype);
  state.SetBytesProcessed(state.iterations() * bytes);
  hwy::SetSupportedTargetsForTest(0);
}

// One token and 64 tokens of each shape of RmsNorm's case table
// (rms_norm_cases.h), on every SIMD target.
void RegisterAll() {
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    for (DType dtype : {DType::kBF16, DType::kF32}) {
      const std::string suffix =
          std::string("/") + hwy::TargetName(target) + "/" + std::string(glmnorm::Name(dtype));
      for (const glmnorm::cases::Shape& shape : glmnorm::cases::kRmsNormBenchShapes) {
        for (int64_t tokens : {1, 64}) {
          const int64_t rows = tokens * shape.rows_per_token;
          const std::string name = "rms_norm/" + std::to_string(rows) + "x" +
                                   std::to_string(shape.width) + suffix;
          benchmark::RegisterBenchmark(name.c_str(), BM_RmsNorm, target, dtype, rows,
                                       shape.width);
        }
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  RegisterAll();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
