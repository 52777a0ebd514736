// glmnorm inspect DIR|FILE.gguf [--json]: every norm of a checkpoint and every problem.
//
// Exit status: 0 sound, 1 problems found, 2 the checkpoint could not be read
// (main prints the error: one line on stderr).
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "commands.h"
#include "core/format_number.h"
#include "glmnorm/checkpoint.h"
#include "glmnorm/error.h"
#include "glmnorm/safetensors.h"
#include "printable.h"

namespace glmnorm::tools {
namespace {

constexpr int kSound = 0;
constexpr int kProblems = 1;

struct InspectArgs {
  std::string dir;
  bool json = false;
};

// The width a table shows: as stored when present and 1-D, else as expected.
int64_t ShownWidth(const NormTensor& n) {
  if (n.present && n.shape.size() == 1) return n.shape[0];
  return n.expected_width;
}

void PrintJson(const CheckpointNorms& ck) {
  const ModelConfig& c = ck.config();
  nlohmann::ordered_json out;
  out["format"] = std::string(ck.format());
  out["model_type"] = c.model_type;
  out["hidden_size"] = c.hidden_size;
  out["head_dim"] = c.head_dim ? nlohmann::ordered_json(*c.head_dim) : nullptr;
  out["num_layers"] = c.num_hidden_layers;
  out["eps"] = c.rms_norm_eps ? nlohmann::ordered_json(*c.rms_norm_eps) : nullptr;
  out["use_qk_norm"] = c.use_qk_norm;
  out["norms"] = nlohmann::ordered_json::array();
  for (const NormTensor& n : ck.norms()) {
    nlohmann::ordered_json entry;
    entry["name"] = n.name;
    if (ck.format() == "gguf") entry["gguf_name"] = n.stored_name;
    entry["role"] = std::string(RoleName(n.role));
    const int64_t width = ShownWidth(n);
    entry["width"] = width > 0 ? nlohmann::ordered_json(width) : nullptr;
    entry["dtype"] = n.present ? nlohmann::ordered_json(n.dtype) : nullptr;
    out["norms"].push_back(std::move(entry));
  }
  out["problems"] = ck.problems();
  std::printf("%s\n", out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}

// Names and problems come from the checkpoint's files: Printable keeps a
// hostile name from breaking the table's lines or driving the terminal.
void PrintText(const CheckpointNorms& ck) {
  const ModelConfig& c = ck.config();
  std::printf("checkpoint   %s\n", Printable(ck.dir()).c_str());
  if (ck.format() == "gguf") {
    std::printf("format       GGUF, %zu file(s); names below are Transformers', llama.cpp's in "
                "--json\n", ck.mapped_shards().size());
  }
  std::printf("model        %s (model_type %s)\n", Printable(ck.model_name()).c_str(),
              c.model_type.empty() ? "missing" : Printable(c.model_type).c_str());
  std::printf("hidden_size  %lld\n", static_cast<long long>(c.hidden_size));
  if (c.head_dim) {
    std::printf("head_dim     %lld\n", static_cast<long long>(*c.head_dim));
  } else {
    std::printf("head_dim     missing from %s\n", Printable(ck.config_source()).c_str());
  }
  std::printf("layers       %lld (+%lld MTP)\n", static_cast<long long>(c.num_hidden_layers),
              static_cast<long long>(c.num_nextn_predict_layers));
  if (c.rms_norm_eps) {
    // GGUF stores eps as float32: show the float it is.
    std::printf("eps          %s\n", ck.format() == "gguf"
                                          ? ShortestString(static_cast<float>(*c.rms_norm_eps)).c_str()
                                          : ShortestString(*c.rms_norm_eps).c_str());
  } else {
    std::printf("eps          missing from %s\n", Printable(ck.config_source()).c_str());
  }
  std::printf("use_qk_norm  %s\n\n", c.use_qk_norm ? "true" : "false");

  size_t name_width = 4;
  for (const NormTensor& n : ck.norms()) {
    name_width = std::max(name_width, Printable(n.name).size());
  }
  const int nw = static_cast<int>(name_width);
  std::printf("%-*s  %-24s %6s  %-5s %10s %10s %10s\n", nw, "name", "role", "width", "dtype", "min",
              "mean", "max");
  for (const NormTensor& n : ck.norms()) {
    const std::string role(RoleName(n.role));
    const std::string name = Printable(n.name);
    if (!n.present) {
      std::printf("%-*s  %-24s %6s  %-5s\n", nw, name.c_str(), role.c_str(), "-", "MISSING");
      continue;
    }
    const std::optional<DType> dtype = DTypeFromSafetensors(n.dtype);
    if (!dtype || !IsFloatActivation(*dtype)) {  // no gamma values to summarise
      std::printf("%-*s  %-24s %6lld  %-5s\n", nw, name.c_str(), role.c_str(),
                  static_cast<long long>(ShownWidth(n)), Printable(n.dtype).c_str());
      continue;
    }
    std::printf("%-*s  %-24s %6lld  %-5s %10.4g %10.4g %10.4g\n", nw, name.c_str(), role.c_str(),
                static_cast<long long>(ShownWidth(n)), n.dtype.c_str(), n.stats.min, n.stats.mean,
                n.stats.max);
  }
  std::printf("\n%zu norms in %zu mapped shard(s)\n", ck.norms().size(), ck.mapped_shards().size());
  if (ck.sound()) {
    std::printf("no problems found\n");
    return;
  }
  std::printf("%zu problem(s):\n", ck.problems().size());
  for (const std::string& p : ck.problems()) std::printf("  - %s\n", Printable(p).c_str());
}

int RunInspect(const InspectArgs& args) {
  // Unreadable: the error propagates to main, which exits 2.
  const CheckpointNorms ck = CheckpointNorms::Open(args.dir);
  if (args.json) {
    PrintJson(ck);
  } else {
    PrintText(ck);
  }
  // The report is the command's result: losing it (a full disk, a closed
  // pipe reader) is a failure, not a success with no output.
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    // errno is the failed write's, whether it failed in a printf or here.
    throw Error(std::string("cannot write the report to standard output: ") +
                (errno != 0 ? std::strerror(errno) : "write error"));
  }
  return ck.sound() ? kSound : kProblems;
}

}  // namespace

void RegisterInspect(CLI::App& app, CommandRunner& runner) {
  auto args = std::make_shared<InspectArgs>();
  CLI::App* cmd =
      app.add_subcommand("inspect",
                         "List every RMSNorm of a GLM-4.5 checkpoint and check it (exit 0 sound, "
                         "1 problems found, 2 unreadable)");
  cmd->add_option("dir", args->dir,
                  "checkpoint directory (config.json, safetensors shards), or a GGUF file (or "
                  "the first file of a split set)")
      ->required();
  cmd->add_flag("--json", args->json,
                "one JSON object: format, model_type, hidden_size, head_dim, num_layers, eps, "
                "use_qk_norm, norms, problems");
  cmd->callback([args, &runner] { runner = [args] { return RunInspect(*args); }; });
}

}  // namespace glmnorm::tools
