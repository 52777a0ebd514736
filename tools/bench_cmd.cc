// `glmnorm bench`: GLM-4.5 shapes, each kernel against a same-run copy.
// `glmnorm bench --quick`: only a few of them (what `make demo` shows).
#include <algorithm>
#include <cmath>
#include <iterator>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench_backward.h"
#include "bench_decoder.h"
#include "bench_runner.h"
#include "commands.h"
#include "core/cpu_features.h"
#include "core/format_number.h"
#include "glmnorm/checkpoint.h"
#include "glmnorm/glmnorm.h"
#include "hwy/aligned_allocator.h"
#include "ops/rms_norm/rms_norm_cases.h"
#include "printable.h"
#include "reference/reference.h"

namespace glmnorm::tools {

namespace {

struct BenchOptions {
  std::vector<int> threads;  // empty: 1 and all cores
  std::vector<int64_t> tokens{std::begin(cases::kBenchTokens), std::end(cases::kBenchTokens)};
  std::vector<std::string> dtypes = {"bf16", "f32"};
  std::string kernel;  // empty: all
  double min_seconds = 0.25;
  bool json = false;
  std::string checkpoint;  // non-empty: gammas and eps from this checkpoint
  bool quick = false;      // only the few cases below, sampled briefly
};

// --quick: rms_norm at decode (1 token) and prefill (4096 tokens) on the
// hidden size 5120, the fused residual add + norm, and QK-norm on 96 q + 8 k
// heads of 128; bf16, as GLM-4.5 runs.
constexpr int64_t kQuickHidden = cases::kHidden.width;
constexpr int64_t kQuickTokens = 4096;
constexpr double kQuickMinSeconds = 0.1;

// A family of rms_norm cases: `rows_per_token` rows of `width` per token,
// normalised with `gamma` (random when null) and eps.
struct Shape {
  std::string name;
  int64_t rows_per_token;
  int64_t width;
  ConstTensorView gamma;  // data == nullptr: a random gamma of the input dtype
};

void AddRmsNormCases(const BenchOptions& o, const std::vector<Shape>& shapes, float eps,
                     int threads, std::vector<BenchCase>& cases,
                     std::vector<std::shared_ptr<void>>& keep) {
  for (const Shape& s : shapes) {
    for (int64_t tokens : o.tokens) {
      for (const std::string& dt : o.dtypes) {
        const DType t = ParseBenchDType(dt);
        const int64_t rows = tokens * s.rows_per_token;
        ConstTensorView gv = s.gamma;
        if (gv.data == nullptr) {
          auto g = std::make_shared<BenchTensor>(t, s.width, 0.2, 1.0, 2);
          keep.push_back(g);
          gv = Contiguous<const void*>(g->data(), t, {s.width});
        }
        const DType yt = Promote(gv.dtype, t);  // cast-then-scale's output dtype
        auto x = std::make_shared<BenchTensor>(t, rows * s.width, 1.0, 0.0, 1);
        auto y = std::make_shared<BenchTensor>(yt, rows * s.width, 0.0, 0.0, 3);
        keep.insert(keep.end(), {x, y});
        const auto xv = Contiguous<const void*>(x->data(), t, {rows, s.width});
        const auto yv = Contiguous<void*>(y->data(), yt, {rows, s.width});
        NormOptions opt;
        opt.eps = eps;
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
        c.model_bytes = cases::RmsNormBytes(rows, s.width, t, gv.dtype, yt);
        c.streams.Read(rows * s.width * int64_t(SizeOf(t)))
            .Write(rows * s.width * int64_t(SizeOf(yt)));
        c.run = [xv, gv, yv, opt] { RmsNorm(xv, gv, yv, opt); };
        c.max_ulp = [xv, gv, yv, opt] {
          return reference::CompareRmsNorm(xv, gv, AsConst(yv), opt, 0, 64).max_ulp;
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
  for (int threads : thread_counts) {
    if (threads < 1) throw Error("bench: --threads must be >= 1, got " + std::to_string(threads));
  }
  for (int64_t tokens : o.tokens) {
    // The upper bound keeps tokens x rows x width far from overflowing int64.
    if (tokens < 1 || tokens > (int64_t{1} << 24)) {
      throw Error("bench: --tokens must be in [1, 16777216], got " + std::to_string(tokens));
    }
  }
  if (!(o.min_seconds > 0.0) || !std::isfinite(o.min_seconds)) {
    throw Error("bench: --min-time must be a finite number of seconds > 0, got " +
                ShortestString(o.min_seconds));
  }
  static const char* const kKernels[] = {"rms_norm",       "add_rms_norm", "add_then_rms_norm",
                                         "add_rms_norm_quant", "rms_norm_quant", "qk_norm",
                                         "qk_norm_rope", "rms_norm_backward",
                                         "add_rms_norm_backward", "qk_norm_rope_backward"};
  if (!o.kernel.empty() && std::find(std::begin(kKernels), std::end(kKernels), o.kernel) ==
                               std::end(kKernels)) {
    std::string list;
    for (const char* k : kKernels) list += std::string(list.empty() ? "" : ", ") + k;
    throw Error("bench: --kernel must be one of " + list + ", got '" + Printable(o.kernel) + "'");
  }
  if (!o.checkpoint.empty() && !o.kernel.empty() && o.kernel != "rms_norm") {
    throw Error("bench: --checkpoint times rms_norm with the checkpoint's gammas; --kernel " +
                Printable(o.kernel) + " does not use them");
  }
  // GLM-4.5 shapes with random gammas, or the checkpoint's own norms.
  // (the case table, rms_norm_cases.h)
  std::vector<Shape> shapes;
  for (const cases::Shape& s : cases::kRmsNormBenchShapes) {
    shapes.push_back({s.name, s.rows_per_token, s.width, {}});
  }
  float eps = kGlmRmsNormEps;
  std::optional<CheckpointNorms> ck;
  if (!o.checkpoint.empty()) {
    ck.emplace(CheckpointNorms::Open(o.checkpoint));
    const ModelConfig& cfg = ck->config();
    eps = ck->eps();
    shapes = {{"model.norm", 1, cfg.hidden_size, ck->Gamma("model.norm.weight")}};
    if (cfg.use_qk_norm && cfg.head_dim) {
      const int64_t heads = cfg.num_attention_heads + 8;  // q heads + GLM's 8 kv heads
      shapes.push_back({"q_norm", heads, *cfg.head_dim,
                        ck->Gamma("model.layers.0.self_attn.q_norm.weight")});
    }
    if (!o.json) {
      std::printf("checkpoint %s: %s, hidden %lld, eps %s, gammas %s\n",
                  Printable(o.checkpoint).c_str(), Printable(ck->model_name()).c_str(),
                  static_cast<long long>(cfg.hidden_size), ShortestString(eps).c_str(),
                  std::string(Name(shapes[0].gamma.dtype)).c_str());
    }
  }

  // The inputs are made once and timed at each thread count: filling them
  // with random values takes longer than timing them.
  if (!o.json) {
    std::printf("filling the inputs with random values...\n");
    std::fflush(stdout);
  }
  std::vector<BenchCase> cases;
  std::vector<std::shared_ptr<void>> keep;
  const int threads = thread_counts.front();
  if (o.quick) {
    BenchOptions rms = o;
    rms.tokens = {1, kQuickTokens};
    rms.dtypes = {"bf16"};
    AddRmsNormCases(rms, {{cases::kHidden.name, 1, kQuickHidden, {}}}, eps, threads, cases, keep);
    for (const char* kernel : {"add_rms_norm", "qk_norm"}) {
      AddDecoderCases(kernel, {kQuickTokens}, {"bf16"}, threads, cases, keep);
    }
  } else {
    if (o.kernel.empty() || o.kernel == "rms_norm") {
      AddRmsNormCases(o, shapes, eps, threads, cases, keep);
    }
    if (!ck) AddDecoderCases(o.kernel, o.tokens, o.dtypes, threads, cases, keep);  // DECODER.md
    if (!ck) AddBackwardCases(o.kernel, o.tokens, o.dtypes, threads, cases, keep);  // BACKWARD.md
  }
  if (!o.json) {
    // Which bf16 rounding the AVX-512 kernels use (core/cpu_features.h).
    std::printf("bf16 rounding: %s\n",
                g_native_bf16 ? "native AVX512-BF16 (GLMNORM_PORTABLE_CONVERSIONS=1 forces the "
                                "portable one)"
                : CpuHasAvx512Bf16() ? "portable (forced by GLMNORM_PORTABLE_CONVERSIONS)"
                                     : "portable (this CPU has no AVX512-BF16)");
    PrintHeader();
  }
  for (int t : thread_counts) {
    for (BenchCase& c : cases) {
      c.threads = t;
      PrintRow(c, Measure(c, o.min_seconds), o.json);
    }
  }
  return 0;
}

}  // namespace

void RegisterBench(CLI::App& app, CommandRunner& runner) {
  auto opts = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "Time the kernels on GLM-4.5 shapes against a same-run copy of the same bytes");
  cmd->add_option("--threads", opts->threads,
                  "Thread counts to run (default: 1 and all cores)");
  CLI::Option* tokens =
      cmd->add_option("--tokens", opts->tokens, "Token counts (default: 1 16 512 4096)");
  CLI::Option* dtype =
      cmd->add_option("--dtype", opts->dtypes, "Activation dtypes (default: bf16 f32)")
          ->check(CLI::IsMember({"bf16", "f16", "f32"}));
  CLI::Option* kernel =
      cmd->add_option("--kernel", opts->kernel, "Only this kernel (e.g. rms_norm)");
  CLI::Option* min_time =
      cmd->add_option("--min-time", opts->min_seconds,
                      "Seconds to sample each case (default 0.25; 0.1 with --quick)");
  cmd->add_flag("--json", opts->json, "One JSON object per line");
  CLI::Option* checkpoint =
      cmd->add_option("--checkpoint", opts->checkpoint,
                      "GLM-4.5 checkpoint directory: rms_norm (only) with its real gammas and eps");
  cmd->add_flag("--quick", opts->quick,
                "Only a few bf16 GLM-4.5 cases: rms_norm 1x5120 and 4096x5120, add_rms_norm "
                "4096x5120, qk_norm 4096x104x128 (what `make demo` runs)")
      ->excludes(tokens)
      ->excludes(dtype)
      ->excludes(kernel)
      ->excludes(checkpoint);
  cmd->callback([opts, min_time, &runner] {
    if (opts->quick && min_time->count() == 0) opts->min_seconds = kQuickMinSeconds;
    runner = [opts] { return RunBench(*opts); };
  });
}

}  // namespace glmnorm::tools
