// glmnorm inspect DIR [--json]: every norm of a checkpoint and every problem.
//
// Exit status: 0 sound, 1 problems found, 2 the checkpoint could not be read.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "commands.h"
#include "glmnorm/checkpoint.h"
#include "glmnorm/safetensors.h"

namespace glmnorm::tools {
namespace {

constexpr int kSound = 0;
constexpr int kProblems = 1;
constexpr int kUnreadable = 2;

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
    entry["role"] = std::string(RoleName(n.role));
    const int64_t width = ShownWidth(n);
    entry["width"] = width > 0 ? nlohmann::ordered_json(width) : nullptr;
    entry["dtype"] = n.present ? nlohmann::ordered_json(n.dtype) : nullptr;
    out["norms"].push_back(std::move(entry));
  }
  out["problems"] = ck.problems();
  std::printf("%s\n", out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}

void PrintText(const CheckpointNorms& ck) {
  const ModelConfig& c = ck.config();
  std::printf("checkpoint   %s\n", ck.dir().c_str());
  std::printf("model        %s (model_type %s)\n", ck.model_name().c_str(),
              c.model_type.empty() ? "missing" : c.model_type.c_str());
  std::printf("hidden_size  %lld\n", static_cast<long long>(c.hidden_size));
  if (c.head_dim) {
    std::printf("head_dim     %lld\n", static_cast<long long>(*c.head_dim));
  } else {
    std::printf("head_dim     missing from config.json\n");
  }
  std::printf("layers       %lld (+%lld MTP)\n", static_cast<long long>(c.num_hidden_layers),
              static_cast<long long>(c.num_nextn_predict_layers));
  if (c.rms_norm_eps) {
    std::printf("eps          %g\n", *c.rms_norm_eps);
  } else {
    std::printf("eps          missing from config.json\n");
  }
  std::printf("use_qk_norm  %s\n\n", c.use_qk_norm ? "true" : "false");

  size_t name_width = 4;
  for (const NormTensor& n : ck.norms()) name_width = std::max(name_width, n.name.size());
  const int nw = static_cast<int>(name_width);
  std::printf("%-*s  %-24s %6s  %-5s %10s %10s %10s\n", nw, "name", "role", "width", "dtype", "min",
              "mean", "max");
  for (const NormTensor& n : ck.norms()) {
    const std::string role(RoleName(n.role));
    if (!n.present) {
      std::printf("%-*s  %-24s %6s  %-5s\n", nw, n.name.c_str(), role.c_str(), "-", "MISSING");
      continue;
    }
    const std::optional<DType> dtype = DTypeFromSafetensors(n.dtype);
    if (!dtype || !IsFloatActivation(*dtype)) {  // no gamma values to summarise
      std::printf("%-*s  %-24s %6lld  %-5s\n", nw, n.name.c_str(), role.c_str(),
                  static_cast<long long>(ShownWidth(n)), n.dtype.c_str());
      continue;
    }
    std::printf("%-*s  %-24s %6lld  %-5s %10.4g %10.4g %10.4g\n", nw, n.name.c_str(), role.c_str(),
                static_cast<long long>(ShownWidth(n)), n.dtype.c_str(), n.stats.min, n.stats.mean,
                n.stats.max);
  }
  std::printf("\n%zu norms in %zu mapped shard(s)\n", ck.norms().size(), ck.mapped_shards().size());
  if (ck.sound()) {
    std::printf("no problems found\n");
    return;
  }
  std::printf("%zu problem(s):\n", ck.problems().size());
  for (const std::string& p : ck.problems()) std::printf("  - %s\n", p.c_str());
}

int RunInspect(const InspectArgs& args) {
  std::unique_ptr<CheckpointNorms> ck;
  try {
    ck = std::make_unique<CheckpointNorms>(CheckpointNorms::Open(args.dir));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "glmnorm: %s\n", e.what());
    return kUnreadable;
  }
  if (args.json) {
    PrintJson(*ck);
  } else {
    PrintText(*ck);
  }
  std::fflush(stdout);
  return ck->sound() ? kSound : kProblems;
}

}  // namespace

void RegisterInspect(CLI::App& app, CommandRunner& runner) {
  auto args = std::make_shared<InspectArgs>();
  CLI::App* cmd =
      app.add_subcommand("inspect",
                         "List every RMSNorm of a GLM-4.5 checkpoint and check it (exit 0 sound, "
                         "1 problems found, 2 unreadable)");
  cmd->add_option("dir", args->dir, "checkpoint directory (config.json, safetensors shards)")
      ->required();
  cmd->add_flag("--json", args->json,
                "one JSON object: model_type, hidden_size, head_dim, num_layers, eps, "
                "use_qk_norm, norms, problems");
  cmd->callback([args, &runner] { runner = [args] { return RunInspect(*args); }; });
}

}  // namespace glmnorm::tools
