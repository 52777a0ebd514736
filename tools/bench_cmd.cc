// `glmnorm bench`: GLM-4.5 shapes, each kernel against a same-run copy.
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench_decoder.h"
#include "bench_runner.h"
#include "commands.h"
#include "glmnorm/glmnorm.h"
#include "hwy/aligned_allocator.h"
#include "reference.h"

namespace glmnorm::tools {

namespace {

struct BenchOptions {
  std::vector<int> threads;  // empty: 1 and all cores
  std::vector<int64_t> tokens = {1, 16, 512, 4096};
  std::vector<std::string> dtypes = {"bf16", "f32"};
  std::string kernel;  // empty: all
  double min_seconds = 0.25;
  bool json = false;
};

DType ParseDType(const std::string& s) {
  if (s == "bf16") return DType::kBF16;
  if (s == "f16") return DType::kF16;
  if (s == "f32") return DType::kF32;
  throw Error("bench: --dtype must be bf16, f16 or f32, got '" + s + "'");
}

// An aligned, randomly filled buffer that lives as long as the case.
struct Tensor {
  hwy::AlignedFreeUniquePtr<uint8_t[]> bytes;
  DType dtype;
  int64_t n;
  Tensor(DType t, int64_t elements, double stddev, double mean, uint64_t seed)
      : bytes(hwy::AllocateAligned<uint8_t>(size_t(elements) * SizeOf(t))), dtype(t), n(elements) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> normal(mean, stddev);
    for (int64_t i = 0; i < n; ++i) reference::Store(bytes.get(), t, i, normal(rng));
  }
  void* data() { return bytes.get(); }
};

struct Shape {
  std::string name;
  int64_t rows_per_token;
  int64_t width;
};

void AddRmsNormCases(const BenchOptions& o, int threads, std::vector<BenchCase>& cases,
                     std::vector<std::shared_ptr<void>>& keep) {
  const Shape shapes[] = {{"hidden 5120", 1, 5120}, {"hidden 4096", 1, 4096},
                          {"qk heads 104x128", 104, 128}};
  for (const Shape& s : shapes) {
    for (int64_t tokens : o.tokens) {
      for (const std::string& dt : o.dtypes) {
        const DType t = ParseDType(dt);
        const int64_t rows = tokens * s.rows_per_token;
        auto x = std::make_shared<Tensor>(t, rows * s.width, 1.0, 0.0, 1);
        auto g = std::make_shared<Tensor>(t, s.width, 0.2, 1.0, 2);
        auto y = std::make_shared<Tensor>(t, rows * s.width, 0.0, 0.0, 3);
        keep.insert(keep.end(), {x, g, y});
        const auto xv = Contiguous<const void*>(x->data(), t, {rows, s.width});
        const auto gv = Contiguous<const void*>(g->data(), t, {s.width});
        const auto yv = Contiguous<void*>(y->data(), t, {rows, s.width});
        BenchCase c;
        c.kernel = "rms_norm";
        c.shape = s.rows_per_token == 1
                      ? std::to_string(tokens) + "x" + std::to_string(s.width)
                      : std::to_string(tokens) + "x" + std::to_string(s.rows_per_token) + "x" +
                            std::to_string(s.width);
        c.dtype = dt;
        c.threads = threads;
        c.rows = rows;
        c.width = s.width;
        c.model_bytes = rows * s.width * 2 * int64_t(SizeOf(t)) + s.width * int64_t(SizeOf(t));
        c.run = [xv, gv, yv] { RmsNorm(xv, gv, yv); };
        c.max_ulp = [xv, gv, yv] {
          return reference::CompareRmsNorm(xv, gv, AsConst(yv), {}, 0, 64).max_ulp;
        };
        cases.push_back(std::move(c));
      }
    }
  }
}

int RunBench(const BenchOptions& o) {
  std::vector<int> thread_counts = o.threads;
  if (thread_counts.empty()) {
    const int all = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    thread_counts = {1};
    if (all > 1) thread_counts.push_back(all);
  }
  if (!o.json) PrintHeader();
  for (int threads : thread_counts) {
    if (threads < 1) throw Error("bench: --threads must be >= 1, got " + std::to_string(threads));
    std::vector<BenchCase> cases;
    std::vector<std::shared_ptr<void>> keep;
    if (o.kernel.empty() || o.kernel == "rms_norm") AddRmsNormCases(o, threads, cases, keep);
    AddDecoderCases(o.kernel, o.tokens, o.dtypes, threads, cases, keep);  // docs/DECODER.md
    for (const BenchCase& c : cases) PrintRow(c, Measure(c, o.min_seconds), o.json);
  }
  return 0;
}

}  // namespace

void RegisterBench(CLI::App& app, CommandRunner& runner) {
  auto opts = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "Time the kernels on GLM-4.5 shapes against a same-run copy of the same bytes");
  cmd->add_option("--threads", opts->threads,
                  "Thread counts to run (default: 1 and all cores)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--tokens", opts->tokens, "Token counts (default: 1 16 512 4096)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--dtype", opts->dtypes, "Activation dtypes (default: bf16 f32)")
      ->check(CLI::IsMember({"bf16", "f16", "f32"}));
  cmd->add_option("--kernel", opts->kernel, "Only this kernel (e.g. rms_norm)");
  cmd->add_option("--min-time", opts->min_seconds, "Seconds to sample each case (default 0.25)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--json", opts->json, "One JSON object per line");
  cmd->callback([opts, &runner] { runner = [opts] { return RunBench(*opts); }; });
}

}  // namespace glmnorm::tools
