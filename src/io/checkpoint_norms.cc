// CheckpointNorms: finds, checks and serves the RMSNorm gammas of a checkpoint.
#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <set>

#include "io/mapped_file.h"
#include "io/norm_layout.h"
#include "core/format_number.h"
#include "glmnorm/checkpoint.h"
#include "glmnorm/error.h"
#include "glmnorm/safetensors.h"

namespace glmnorm {
namespace {

constexpr size_t kMaxJsonFileBytes = 64u << 20;  // the 355B index is ~100 KB
constexpr char kConfigFile[] = "config.json";
constexpr char kIndexFile[] = "model.safetensors.index.json";
constexpr char kSingleFile[] = "model.safetensors";
// The constructor default of Transformers' RMSNorm classes and of LLaMA
// ports; a GLM-4.5 config carrying it was most likely written by a port.
constexpr double kSuspiciousEps = 1e-6;

// Whether anything is at `path`: a directory or FIFO where a JSON file or a
// shard belongs is reported as what it is by its reader, not taken for a
// missing file.
bool PathExists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

float LoadAsFloat(const std::byte* p, DType dtype) {
  uint16_t h;
  switch (dtype) {
    case DType::kF32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DType::kBF16:
      std::memcpy(&h, p, 2);
      return F32FromBF16(h);
    case DType::kF16:
      std::memcpy(&h, p, 2);
      return F32FromF16(h);
    default:
      return std::nanf("");
  }
}

GammaStats Stats(std::span<const std::byte> bytes, DType dtype, int64_t* first_bad) {
  GammaStats s;
  const size_t size = SizeOf(dtype);
  const size_t n = bytes.size() / size;
  double sum = 0.0;
  int64_t finite = 0;
  s.min = std::numeric_limits<float>::infinity();
  s.max = -std::numeric_limits<float>::infinity();
  *first_bad = -1;
  for (size_t i = 0; i < n; ++i) {
    const float v = LoadAsFloat(bytes.data() + i * size, dtype);
    if (std::isfinite(v)) {
      s.min = std::min(s.min, v);
      s.max = std::max(s.max, v);
      sum += v;
      ++finite;
      continue;
    }
    if (*first_bad < 0) *first_bad = static_cast<int64_t>(i);
    (std::isnan(v) ? s.nan_count : s.inf_count) += 1;
  }
  if (finite == 0) {
    s.min = s.max = 0.0f;
  } else {
    s.mean = static_cast<float>(sum / static_cast<double>(finite));
  }
  return s;
}

std::string ModelName(const ModelConfig& c) {
  if (c.model_type == "glm4_moe") {
    if (c.hidden_size == 5120 && c.num_hidden_layers == 92 && c.use_qk_norm) return "GLM-4.5";
    if (c.hidden_size == 4096 && c.num_hidden_layers == 46 && !c.use_qk_norm) return "GLM-4.5-Air";
    return "glm4_moe";
  }
  return c.model_type.empty() ? "(no model_type)" : c.model_type;
}

}  // namespace

std::string_view RoleName(NormRole role) {
  switch (role) {
    case NormRole::kInputLayernorm:
      return "input_layernorm";
    case NormRole::kPostAttentionLayernorm:
      return "post_attention_layernorm";
    case NormRole::kQNorm:
      return "q_norm";
    case NormRole::kKNorm:
      return "k_norm";
    case NormRole::kFinalNorm:
      return "final_norm";
    case NormRole::kMtpENorm:
      return "mtp_enorm";
    case NormRole::kMtpHNorm:
      return "mtp_hnorm";
    case NormRole::kMtpSharedHeadNorm:
      return "mtp_shared_head_norm";
  }
  return "?";
}

struct CheckpointNorms::Shards {
  std::map<std::string, SafetensorsFile> files;  // by shard name, only those mapped
  std::deque<std::vector<std::byte>> copies;     // gammas the format left unaligned
};

CheckpointNorms::CheckpointNorms(CheckpointNorms&&) noexcept = default;
CheckpointNorms& CheckpointNorms::operator=(CheckpointNorms&&) noexcept = default;
CheckpointNorms::~CheckpointNorms() = default;

CheckpointNorms CheckpointNorms::Open(const std::string& dir) {
  CheckpointNorms n;
  n.dir_ = dir;
  while (n.dir_.size() > 1 && n.dir_.back() == '/') n.dir_.pop_back();
  n.shards_ = std::make_unique<Shards>();
  n.Load();
  return n;
}

void CheckpointNorms::Load() {
  const std::string config_path = dir_ + "/" + kConfigFile;
  config_ =
      ParseModelConfig(checkpoint::ReadSmallFile(config_path, kMaxJsonFileBytes), config_path);
  model_name_ = ModelName(config_);
  auto problem = [&](std::string text) { problems_.push_back(std::move(text)); };

  // config.json.
  if (config_.model_type != "glm4_moe") {
    problem(std::string(kConfigFile) + ": model_type is \"" + config_.model_type +
            "\", expected \"glm4_moe\" (GLM-4.5, GLM-4.5-Air)");
  }
  if (!config_.rms_norm_eps) {
    problem(std::string(kConfigFile) +
            ": rms_norm_eps is missing; GLM-4.5 uses 1e-05 and glmnorm will not guess it");
  } else {
    const double eps = *config_.rms_norm_eps;
    if (!std::isfinite(eps) || eps < 0.0 || eps > 1.0) {
      problem(std::string(kConfigFile) + ": rms_norm_eps = " + ShortestString(eps) +
              " is not a small non-negative number");
    } else if (std::fabs(eps - kSuspiciousEps) < 1e-12) {
      problem(std::string(kConfigFile) +
              ": rms_norm_eps is 1e-06, the default of Transformers' RMSNorm classes and of "
              "LLaMA ports; GLM-4.5 checkpoints use 1e-05 (warning: check where this config "
              "came from)");
    }
  }
  if (config_.use_qk_norm && !config_.head_dim) {
    std::string derived;
    if (config_.num_attention_heads > 0) {
      derived = " (hidden_size / num_attention_heads = " +
                std::to_string(config_.hidden_size / config_.num_attention_heads) +
                " is not it in GLM-4.5)";
    }
    problem(std::string(kConfigFile) +
            ": head_dim is missing, so the width of the q/k norms is unknown" + derived);
  }

  norms_ = checkpoint::ExpectedNorms(config_);
  for (size_t i = 0; i < norms_.size(); ++i) by_name_.emplace(norms_[i].name, i);

  // Where each tensor lives.
  ShardIndex index;
  const std::string index_path = dir_ + "/" + kIndexFile;
  const std::string single_path = dir_ + "/" + kSingleFile;
  if (PathExists(index_path)) {
    index = ParseShardIndex(checkpoint::ReadSmallFile(index_path, kMaxJsonFileBytes), index_path);
  } else if (PathExists(single_path)) {
    SafetensorsFile file = SafetensorsFile::Open(single_path);
    for (const SafetensorsTensor& t : file.tensors()) index.weight_map.emplace(t.name, kSingleFile);
    shards_->files.emplace(kSingleFile, std::move(file));
  } else {
    throw Error(dir_ + ": no " + kIndexFile + " and no " + kSingleFile +
                " (not a safetensors checkpoint directory)");
  }

  // Map exactly the shards that hold norms; a shard that cannot be read is
  // fatal because its norms cannot be checked.
  for (NormTensor& norm : norms_) {
    auto it = index.weight_map.find(norm.name);
    if (it == index.weight_map.end()) continue;
    if (!shards_->files.count(it->second)) {
      shards_->files.emplace(it->second, SafetensorsFile::Open(dir_ + "/" + it->second));
    }
  }

  for (NormTensor& norm : norms_) {
    const std::string role(RoleName(norm.role));
    auto it = index.weight_map.find(norm.name);
    if (it == index.weight_map.end()) {
      const std::string width =
          norm.expected_width > 0 ? "[" + std::to_string(norm.expected_width) + "]" : "[head_dim]";
      problem("missing norm " + norm.name + " (" + role + ", expected " + width + ")");
      continue;
    }
    const SafetensorsFile& file = shards_->files.at(it->second);
    const SafetensorsTensor* t = file.Find(norm.name);
    if (t == nullptr) {
      problem("missing norm " + norm.name + ": " + kIndexFile + " maps it to " + it->second +
              ", which does not contain it");
      continue;
    }
    norm.present = true;
    norm.shard = it->second;
    norm.dtype = t->dtype;
    norm.shape = t->shape;
    const std::optional<DType> dtype = DTypeFromSafetensors(t->dtype);
    if (!dtype || !IsFloatActivation(*dtype)) {
      problem(norm.name + ": dtype " + t->dtype + ", expected BF16, F16 or F32");
      continue;
    }
    int64_t first_bad = -1;
    norm.stats = Stats(file.Bytes(*t), *dtype, &first_bad);
    bool ok = true;
    if (t->shape.size() != 1) {
      problem(norm.name + ": shape " + ShapeString(t->shape) + ", expected a 1-D gamma [" +
              std::to_string(norm.expected_width) + "]");
      ok = false;
    } else {
      const int64_t width = t->shape[0];
      const bool qk = norm.role == NormRole::kQNorm || norm.role == NormRole::kKNorm;
      if (qk && width == config_.hidden_size && width != norm.expected_width) {
        problem(norm.name + ": width " + std::to_string(width) +
                " is hidden_size, but a QK-norm gamma has head_dim (" +
                (config_.head_dim ? std::to_string(*config_.head_dim) : std::string("unknown")) +
                ") entries: this is a hidden-width gamma on a QK-norm, the wrong tensor");
        ok = false;
      } else if (norm.expected_width > 0 && width != norm.expected_width) {
        problem(norm.name + ": width " + std::to_string(width) + ", expected " +
                (qk ? "head_dim " : "hidden_size ") + std::to_string(norm.expected_width));
        ok = false;
      }
    }
    if (norm.stats.nan_count > 0 || norm.stats.inf_count > 0) {
      problem(norm.name + ": gamma has " + std::to_string(norm.stats.nan_count) + " NaN and " +
              std::to_string(norm.stats.inf_count) + " inf values (first at index " +
              std::to_string(first_bad) + ")");
      ok = false;
    }
    if (!ok) continue;
    std::vector<std::byte> copy;
    norm.gamma = file.View(*t, &copy);
    if (!copy.empty()) {
      shards_->copies.push_back(std::move(copy));
      norm.gamma.data = shards_->copies.back().data();
    }
  }

  // Norm-shaped tensors the config does not call for: an engine following
  // the config would silently ignore them (e.g. q/k norms with
  // use_qk_norm false), which usually means config and weights disagree.
  const int64_t total_layers = config_.num_hidden_layers + config_.num_nextn_predict_layers;
  for (const auto& [name, shard] : index.weight_map) {
    if (by_name_.count(name)) continue;
    const std::optional<checkpoint::NormName> parsed = checkpoint::ParseNormName(name);
    if (!parsed) continue;
    std::string why;
    if (parsed->layer >= total_layers) {
      why = "layer " + std::to_string(parsed->layer) + " is beyond num_hidden_layers + " +
            "num_nextn_predict_layers = " + std::to_string(total_layers);
    } else if (parsed->role == NormRole::kQNorm || parsed->role == NormRole::kKNorm) {
      why = "config.json has use_qk_norm false, so this gamma would be ignored";
    } else {
      why = "not a norm of layer " + std::to_string(parsed->layer) + " in this model";
    }
    problem("unexpected norm " + name + ": " + why);
  }

  // Shards the index names that do not exist (only stat'ed, never mapped).
  std::map<std::string, int> others;
  for (const auto& [name, shard] : index.weight_map) {
    if (!shards_->files.count(shard)) ++others[shard];
  }
  for (const auto& [shard, count] : others) {
    struct stat st {};
    if (stat((dir_ + "/" + shard).c_str(), &st) != 0) {
      problem(std::string(kIndexFile) + " names shard " + shard + " (" + std::to_string(count) +
              " tensors), which does not exist");
    } else if (!S_ISREG(st.st_mode)) {
      problem(std::string(kIndexFile) + " names shard " + shard + " (" + std::to_string(count) +
              " tensors), which is " + std::string(checkpoint::FileTypeName(st.st_mode)) +
              ", expected a regular file");
    }
  }
}

const NormTensor* CheckpointNorms::Find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &norms_[it->second];
}

float CheckpointNorms::eps() const {
  if (!config_.rms_norm_eps) {
    throw Error(dir_ + "/" + kConfigFile + ": rms_norm_eps is missing; cannot apply its norms");
  }
  const double eps = *config_.rms_norm_eps;
  if (!std::isfinite(eps) || eps < 0.0 || eps > 1.0) {
    throw Error(dir_ + "/" + kConfigFile + ": rms_norm_eps = " + ShortestString(eps) +
                " is invalid");
  }
  return static_cast<float>(eps);
}

NormOptions CheckpointNorms::Options(Rounding rounding) const {
  NormOptions options;
  options.eps = eps();
  options.rounding = rounding;
  return options;
}

ConstTensorView CheckpointNorms::Gamma(std::string_view name) const {
  const NormTensor* norm = Find(name);
  if (norm == nullptr) {
    std::string hint;
    if (name.starts_with("model.") && !name.ends_with(".weight")) {
      hint = " (norm names end in .weight, e.g. model.norm.weight)";
    }
    throw Error(dir_ + ": \"" + std::string(name) + "\" is not a norm of this " + model_name_ +
                " model" + hint);
  }
  if (!norm->usable()) {
    // Repeat the problem found for it, so the caller sees why.
    for (const std::string& p : problems_) {
      if (p.find(norm->name + ":") != std::string::npos ||
          p.find(norm->name + " (") != std::string::npos) {
        throw Error(dir_ + ": cannot use " + norm->name + ": " + p);
      }
    }
    throw Error(dir_ + ": cannot use " + norm->name);
  }
  return norm->gamma;
}

std::vector<std::string> CheckpointNorms::mapped_shards() const {
  std::vector<std::string> out;
  for (const auto& [name, file] : shards_->files) out.push_back(name);
  return out;
}

}  // namespace glmnorm
